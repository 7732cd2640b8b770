//! One tower wrapper for the gateway's checks (the rate limit, the in-flight limits): a
//! `Check` answers a request itself or hands it to the service it wraps.

use axum::body::Body;
use axum::http::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// The service a `Check` hands requests to.
pub trait Inner:
    Service<Request<Body>, Response = Response<Body>, Future: Send + 'static, Error: Send + 'static>
    + Send
    + 'static
{
}

impl<S> Inner for S where
    S: Service<
            Request<Body>,
            Response = Response<Body>,
            Future: Send + 'static,
            Error: Send + 'static,
        > + Send
        + 'static
{
}

/// What a check answers: the inner service's response or error, or its own response.
pub type Answer<S> = Result<Response<Body>, <S as Service<Request<Body>>>::Error>;

/// What a wrapped service does with each request before (and instead of) the inner service.
pub trait Check: Send + Sync + 'static {
    fn check<S: Inner>(
        self: Arc<Self>,
        req: Request<Body>,
        inner: S,
    ) -> impl Future<Output = Answer<S>> + Send;
}

/// The layer that puts a `Check` in front of a service.
pub struct Wrap<C>(pub Arc<C>);

impl<C> Clone for Wrap<C> {
    fn clone(&self) -> Self {
        Wrap(self.0.clone())
    }
}

impl<S, C> Layer<S> for Wrap<C> {
    type Service = Wrapped<S, C>;

    fn layer(&self, inner: S) -> Wrapped<S, C> {
        Wrapped {
            inner,
            check: self.0.clone(),
        }
    }
}

pub struct Wrapped<S, C> {
    inner: S,
    // Behind an Arc: each request's future holds a pointer, not the whole check.
    check: Arc<C>,
}

impl<S: Clone, C> Clone for Wrapped<S, C> {
    fn clone(&self) -> Self {
        Wrapped {
            inner: self.inner.clone(),
            check: self.check.clone(),
        }
    }
}

impl<S: Inner + Clone, C: Check> Service<Request<Body>> for Wrapped<S, C> {
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Answer<S>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // The service that was polled ready serves this request; the clone waits for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(self.check.clone().check(req, inner))
    }
}
