//! The limiter as a tower layer: any tower service (an axum router, a proxy) gets one
//! rate-limit check per request before it runs, and the rate-limit headers on its response.

use crate::config::RefundOn;
use crate::headers;
use crate::limiter::{Limiter, Verdict};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<Limiter>,
    policy: HeaderValue,
    refund_on: Option<RefundOn>,
    tenant_header: Option<HeaderName>,
}

impl RateLimitLayer {
    pub fn new(
        limiter: Limiter,
        refund_on: Option<RefundOn>,
        tenant_header: Option<HeaderName>,
    ) -> RateLimitLayer {
        let policy = headers::policy(limiter.limits());
        RateLimitLayer {
            limiter: Arc::new(limiter),
            policy,
            refund_on,
            tenant_header,
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    layer: RateLimitLayer,
}

/// Who is asking: the `x-api-key` header, else the client's IP address. An IPv4 client seen
/// through an IPv6 socket (`::ffff:127.0.0.1`) is its IPv4 address: one client, one quota.
pub fn identity<B>(req: &Request<B>) -> Vec<u8> {
    if let Some(key) = req.headers().get(API_KEY) {
        return key.as_bytes().to_vec();
    }
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(
            || b"unknown".to_vec(),
            |c| c.0.ip().to_canonical().to_string().into_bytes(),
        )
}

/// The tenant named by the header: not empty, and without braces, which would change the
/// keys' hash tag (and let one tenant's keys be spelled as another's).
fn tenant<'r, B>(req: &'r Request<B>, header: &HeaderName) -> Option<&'r [u8]> {
    let t = req.headers().get(header)?.as_bytes();
    (!t.is_empty() && !t.iter().any(|&b| b == b'{' || b == b'}')).then_some(t)
}

impl<S> Service<Request<Body>> for RateLimit<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // The service that was polled ready serves this request; the clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let limits = layer.limiter.limits();
            let tenant = match &layer.tenant_header {
                None => None,
                Some(h) => match tenant(&req, h) {
                    Some(t) => Some(t.to_vec()),
                    None => {
                        let body = format!(
                            "{{\"error\":\"missing or invalid tenant header\",\"header\":\"{h}\"}}\n"
                        );
                        return Ok(json(StatusCode::BAD_REQUEST, body));
                    }
                },
            };
            match layer
                .limiter
                .check(&identity(&req), tenant.as_deref())
                .await
            {
                Verdict::Admit(d, charge) => {
                    let mut resp = inner.call(req).await?;
                    stamp(
                        resp.headers_mut(),
                        &layer.policy,
                        headers::ratelimit(limits, &d),
                    );
                    if layer.refund_on == Some(RefundOn::ServerError)
                        && resp.status().is_server_error()
                    {
                        // Off the response's path: the client does not wait for the refund.
                        let limiter = layer.limiter.clone();
                        tokio::spawn(async move { limiter.refund(&charge).await });
                    }
                    Ok(resp)
                }
                Verdict::Refuse(d) => {
                    let mut resp = json(
                        StatusCode::TOO_MANY_REQUESTS,
                        headers::refused_body(limits, &d),
                    );
                    stamp(
                        resp.headers_mut(),
                        &layer.policy,
                        headers::ratelimit(limits, &d),
                    );
                    if let Some(secs) = headers::retry_after(&d) {
                        resp.headers_mut().insert(header::RETRY_AFTER, secs);
                    }
                    Ok(resp)
                }
                Verdict::Unchecked => inner.call(req).await,
                Verdict::Unavailable => Ok(json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "{\"error\":\"rate limiter unavailable\"}\n".to_string(),
                )),
            }
        })
    }
}

fn stamp(h: &mut HeaderMap, policy: &HeaderValue, ratelimit: HeaderValue) {
    h.insert(RATELIMIT_POLICY, policy.clone());
    h.insert(RATELIMIT, ratelimit);
}

fn json(status: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_the_api_key_else_the_ip() {
        let mut req = Request::new(());
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([10, 1, 2, 3], 5555))));
        assert_eq!(identity(&req), b"10.1.2.3");
        req.headers_mut()
            .insert(API_KEY, HeaderValue::from_static("k-42"));
        assert_eq!(identity(&req), b"k-42");
    }

    #[test]
    fn an_ipv4_client_on_an_ipv6_socket_is_its_ipv4_address() {
        let mut req = Request::new(());
        let mapped: std::net::Ipv6Addr = "::ffff:127.0.0.1".parse().unwrap();
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((mapped, 5555))));
        assert_eq!(identity(&req), b"127.0.0.1");
        let v6: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((v6, 5555))));
        assert_eq!(identity(&req), b"2001:db8::1");
    }

    #[test]
    fn tenants_are_plain_names() {
        let h = HeaderName::from_static("x-tenant");
        let with = |v: &'static str| {
            let mut req = Request::new(());
            req.headers_mut()
                .insert(h.clone(), HeaderValue::from_static(v));
            tenant(&req, &h).map(<[u8]>::to_vec)
        };
        assert_eq!(with("acme"), Some(b"acme".to_vec()));
        assert_eq!(with(""), None);
        assert_eq!(with("a}:b"), None);
        assert_eq!(with("{a"), None);
        assert_eq!(tenant(&Request::new(()), &h), None);
    }
}
