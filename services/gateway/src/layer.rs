//! The limiter as a tower layer: any tower service (an axum router, a proxy) gets one
//! rate-limit check per request before it runs, and the rate-limit headers on its response.

use crate::config::{Config, RefundOn};
use crate::headers;
use crate::identity;
use crate::limiter::{Charge, Limiter, Settle, Start, Verdict};
use crate::metrics::Metrics;
use crate::wrap::{Answer, Check, Inner};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<Limiter>,
    policy: HeaderValue,
    refund_on: Option<RefundOn>,
    tenant_header: Option<HeaderName>,
    identity_header: HeaderName,
    ipv6_prefix: u8,
    metrics: Arc<Metrics>,
    settle: Option<Arc<Settle>>,
}

impl RateLimitLayer {
    pub fn new(limiter: Arc<Limiter>, cfg: &Config, metrics: Arc<Metrics>) -> RateLimitLayer {
        let policy = headers::policy(limiter.limits());
        let settle = cfg
            .reserve
            .zip(cfg.settle_header.clone())
            .map(|(n, header)| Arc::new(Settle::new(n, header, metrics.clone())));
        RateLimitLayer {
            limiter,
            policy,
            refund_on: cfg.refund_on,
            tenant_header: cfg.tenant_header.clone(),
            identity_header: cfg.identity_header.clone(),
            ipv6_prefix: cfg.ipv6_prefix,
            metrics,
            settle,
        }
    }
}

/// Who is asking: the identity header's value (hashed when long), else the client's address:
/// IPv4 (also as seen through an IPv6 socket, `::ffff:127.0.0.1`: one client, one quota), or
/// the IPv6 prefix of `ipv6_prefix` bits.
pub fn identity<'r, B>(req: &'r Request<B>, header: &HeaderName, ipv6_prefix: u8) -> Cow<'r, [u8]> {
    if let Some(key) = req.headers().get(header).filter(|v| !v.is_empty()) {
        return identity::bounded(key.as_bytes());
    }
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(Cow::Borrowed(b"unknown"), |c| {
            Cow::Owned(identity::address(c.0.ip(), ipv6_prefix).into_bytes())
        })
}

/// The tenant named by the header (hashed when long): not empty, and without braces, which
/// would change the keys' hash tag (and let one tenant's keys be spelled as another's).
pub fn tenant<'r, B>(req: &'r Request<B>, header: &HeaderName) -> Option<Cow<'r, [u8]>> {
    let t = req.headers().get(header)?.as_bytes();
    (!t.is_empty() && !t.iter().any(|&b| b == b'{' || b == b'}')).then(|| identity::bounded(t))
}

impl Check for RateLimitLayer {
    async fn check<S: Inner>(self: Arc<Self>, req: Request<Body>, mut inner: S) -> Answer<S> {
        let layer = self;
        let limits = layer.limiter.limits();
        let tenant = match &layer.tenant_header {
            None => None,
            Some(h) => match tenant(&req, h) {
                Some(t) => Some(t.into_owned()),
                None => {
                    let body = format!(
                        "{{\"error\":\"missing or invalid tenant header\",\"header\":\"{h}\"}}\n"
                    );
                    return Ok(json(StatusCode::BAD_REQUEST, body));
                }
            },
        };
        let who = identity(&req, &layer.identity_header, layer.ipv6_prefix);
        // The Redis part boxed apart (as is the refunding wrapper below): this future,
        // allocated for every request, is 1,008 bytes instead of 4,416.
        let verdict = match &layer.settle {
            Some(s) => Box::pin(layer.limiter.reserve(s, &who)).await,
            None => match layer.limiter.start(&who, tenant.as_deref()) {
                Start::Done(v) => v,
                Start::Pending(p) => Box::pin(layer.limiter.finish(p)).await,
            },
        };
        if let Verdict::Refuse(_) = verdict {
            layer.metrics.refused(&who);
        }
        drop(who);
        match verdict {
            Verdict::Admit(d, charge) => {
                let mut resp = match layer.refund_on {
                    None => {
                        drop(charge);
                        inner.call(req).await?
                    }
                    Some(RefundOn::ServerError) => {
                        Box::pin(Refunded::new(inner.call(req), charge, &layer.limiter)).await?
                    }
                };
                stamp(
                    resp.headers_mut(),
                    &layer.policy,
                    headers::ratelimit(limits, &d),
                );
                Ok(resp)
            }
            Verdict::Reserved(d, r) => {
                let mut resp = inner.call(req).await?;
                if let Some(s) = &layer.settle {
                    layer.limiter.settle_reservation(s, r, resp.headers());
                }
                stamp(
                    resp.headers_mut(),
                    &layer.policy,
                    headers::ratelimit(limits, &d),
                );
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
    }
}

/// The upstream's answer to an admitted request with `--refund-on 5xx`: a 5xx gives the charge
/// back, off the response's path. If the client hangs up first, the upstream call goes on in a
/// task of its own, so that a failure it ends with is refunded all the same.
struct Refunded<F, E>
where
    F: Future<Output = Result<Response<Body>, E>> + Send + 'static,
    E: Send + 'static,
{
    call: Option<Pin<Box<F>>>,
    charge: Option<Charge>,
    limiter: Arc<Limiter>,
    error: PhantomData<fn() -> E>,
}

impl<F, E> Refunded<F, E>
where
    F: Future<Output = Result<Response<Body>, E>> + Send + 'static,
    E: Send + 'static,
{
    fn new(call: F, charge: Charge, limiter: &Arc<Limiter>) -> Self {
        Refunded {
            call: Some(Box::pin(call)),
            charge: Some(charge),
            limiter: limiter.clone(),
            error: PhantomData,
        }
    }
}

/// Whether the upstream's answer takes the charge back.
fn failed<E>(r: &Result<Response<Body>, E>) -> bool {
    r.as_ref()
        .map_or(true, |resp| resp.status().is_server_error())
}

impl<F, E> Future for Refunded<F, E>
where
    F: Future<Output = Result<Response<Body>, E>> + Send + 'static,
    E: Send + 'static,
{
    type Output = Result<Response<Body>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(call) = self.call.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(call.as_mut().poll(cx));
        self.call = None;
        if failed(&out)
            && let Some(charge) = self.charge.take()
        {
            let limiter = self.limiter.clone();
            self.limiter
                .spawn(async move { limiter.refund(charge).await });
        }
        Poll::Ready(out)
    }
}

impl<F, E> Drop for Refunded<F, E>
where
    F: Future<Output = Result<Response<Body>, E>> + Send + 'static,
    E: Send + 'static,
{
    fn drop(&mut self) {
        // Dropped before the upstream answered: the client went away. (Without a runtime, the
        // process is ending: nothing can be sent.)
        let (Some(call), Some(charge)) = (self.call.take(), self.charge.take()) else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let limiter = self.limiter.clone();
        self.limiter.spawn(async move {
            if failed(&call.await) {
                limiter.refund(charge).await;
            }
        });
    }
}

fn stamp(h: &mut HeaderMap, policy: &HeaderValue, ratelimit: HeaderValue) {
    h.insert(RATELIMIT_POLICY, policy.clone());
    h.insert(RATELIMIT, ratelimit);
}

pub fn json(status: StatusCode, body: String) -> Response<Body> {
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

    const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

    fn who<B>(req: &Request<B>) -> Vec<u8> {
        identity(req, &API_KEY, 64).into_owned()
    }

    #[test]
    fn identity_is_the_header_else_the_ip() {
        let mut req = Request::new(());
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([10, 1, 2, 3], 5555))));
        assert_eq!(who(&req), b"10.1.2.3");
        req.headers_mut()
            .insert(API_KEY, HeaderValue::from_static("k-42"));
        assert_eq!(who(&req), b"k-42");
        let other = HeaderName::from_static("x-user");
        assert_eq!(identity(&req, &other, 64).as_ref(), b"10.1.2.3");
        // An empty value is no identity: the client's address.
        req.headers_mut()
            .insert(API_KEY, HeaderValue::from_static(""));
        assert_eq!(who(&req), b"10.1.2.3");
        let long = HeaderValue::from_str(&"k".repeat(400)).unwrap();
        req.headers_mut().insert(API_KEY, long);
        assert_eq!(who(&req).len(), 71);
    }

    #[test]
    fn an_ipv4_client_on_an_ipv6_socket_is_its_ipv4_address() {
        let mut req = Request::new(());
        let mapped: std::net::Ipv6Addr = "::ffff:127.0.0.1".parse().unwrap();
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((mapped, 5555))));
        assert_eq!(who(&req), b"127.0.0.1");
        let v6: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((v6, 5555))));
        assert_eq!(who(&req), b"2001:db8::/64");
        assert_eq!(identity(&req, &API_KEY, 128).as_ref(), b"2001:db8::1");
    }

    #[test]
    fn tenants_are_plain_names() {
        let h = HeaderName::from_static("x-tenant");
        let with = |v: &'static str| {
            let mut req = Request::new(());
            req.headers_mut()
                .insert(h.clone(), HeaderValue::from_static(v));
            tenant(&req, &h).map(Cow::into_owned)
        };
        assert_eq!(with("acme"), Some(b"acme".to_vec()));
        assert_eq!(with(""), None);
        assert_eq!(with("a}:b"), None);
        assert_eq!(with("{a"), None);
        assert_eq!(tenant(&Request::new(()), &h), None);
    }
}
