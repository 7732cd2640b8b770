//! The limiter as a tower layer: any tower service (an axum router, a proxy) gets one
//! SLIDINGWINDOW.ALLOW per request before it runs, and the rate-limit headers on its response.

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
}

impl RateLimitLayer {
    pub fn new(limiter: Limiter) -> RateLimitLayer {
        let policy = headers::policy(limiter.limits());
        RateLimitLayer {
            limiter: Arc::new(limiter),
            policy,
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

/// Who is asking: the `x-api-key` header, else the client's IP address.
pub fn identity<B>(req: &Request<B>) -> Vec<u8> {
    if let Some(key) = req.headers().get(API_KEY) {
        return key.as_bytes().to_vec();
    }
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(
            || b"unknown".to_vec(),
            |c| c.0.ip().to_string().into_bytes(),
        )
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
            match layer.limiter.check(&identity(&req)).await {
                Verdict::Admit(d) => {
                    let mut resp = inner.call(req).await?;
                    stamp(resp.headers_mut(), &layer.policy, headers::ratelimit(&d));
                    Ok(resp)
                }
                Verdict::Refuse(d) => {
                    let mut resp = json(StatusCode::TOO_MANY_REQUESTS, headers::refused_body(&d));
                    stamp(resp.headers_mut(), &layer.policy, headers::ratelimit(&d));
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
}
