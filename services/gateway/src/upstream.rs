//! What admitted requests reach: a reverse proxy to --upstream, or a built-in `200 ok`.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{
    HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri, Version, header,
};
use axum::response::IntoResponse;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use slidingwindow_client::ErrorLog;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

#[derive(Clone)]
pub enum Upstream {
    Ok,
    Proxy(Arc<Proxy>),
}

pub struct Proxy {
    client: Client<HttpConnector, Body>,
    base: Uri,
    timeout: Duration,
    /// Failures on stderr, one line a second at most, with their causes.
    log: ErrorLog,
}

impl Upstream {
    /// `timeout`: how long the upstream may take to answer (status line and headers).
    pub fn new(base: Option<Uri>, timeout: Duration) -> Upstream {
        match base {
            None => Upstream::Ok,
            Some(base) => {
                // As for the listener: no Nagle delay on small requests.
                let mut connector = HttpConnector::new();
                connector.set_nodelay(true);
                let log = ErrorLog::new("gateway", &format!("upstream {base}"));
                Upstream::Proxy(Arc::new(Proxy {
                    client: Client::builder(TokioExecutor::new()).build(connector),
                    base,
                    timeout,
                    log,
                }))
            }
        }
    }

    pub async fn handle(self, req: Request<Body>) -> Response<Body> {
        match self {
            Upstream::Ok => (StatusCode::OK, "ok\n").into_response(),
            Upstream::Proxy(p) => p.forward(req).await,
        }
    }
}

impl Proxy {
    async fn forward(&self, req: Request<Body>) -> Response<Body> {
        let Some(req) = to_upstream(&self.base, req) else {
            return status(StatusCode::BAD_REQUEST, "bad request path\n");
        };
        let client_version = req.version();
        match tokio::time::timeout(self.timeout, self.client.request(to_11(req))).await {
            Ok(Ok(resp)) => {
                self.log.succeeded();
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                parts.version = client_version;
                Response::from_parts(parts, Body::new(body))
            }
            Ok(Err(err)) => {
                self.log.failed("answering 502", &Causes(&err));
                status(StatusCode::BAD_GATEWAY, "upstream unreachable\n")
            }
            Err(_) => {
                let why = format!("no answer within {:?}", self.timeout);
                self.log.failed("answering 504", &why);
                status(StatusCode::GATEWAY_TIMEOUT, "upstream timed out\n")
            }
        }
    }
}

/// The upstream is asked in HTTP/1.1 whatever the client spoke.
fn to_11(mut req: Request<Body>) -> Request<Body> {
    *req.version_mut() = Version::HTTP_11;
    req
}

/// An error and its sources, `a: b: c` (hyper's own text alone is `client error (Connect)`).
struct Causes<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

/// The request as the upstream gets it: its URI under the base, hop-by-hop headers dropped, the
/// client's address appended to X-Forwarded-For. `None`: a path that makes no URI.
fn to_upstream(base: &Uri, mut req: Request<Body>) -> Option<Request<Body>> {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let prefix = base.path().trim_end_matches('/');
    let uri = Uri::builder()
        .scheme("http")
        .authority(base.authority().map_or("", |a| a.as_str()))
        .path_and_query(format!("{prefix}{path}"))
        .build();
    *req.uri_mut() = uri.ok()?;
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_canonical());
    let headers = req.headers_mut();
    strip_hop_by_hop(headers);
    // The client sets Host from the upstream URI.
    headers.remove(header::HOST);
    if let Some(ip) = peer {
        forwarded_for(headers, &ip.to_string());
    }
    Some(req)
}

/// Appends the client's address to the `X-Forwarded-For` list it sent (one header line, the
/// proxies in order), or starts the list.
fn forwarded_for(h: &mut HeaderMap, ip: &str) {
    let mut list: Vec<&str> = h
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    list.push(ip);
    if let Ok(v) = HeaderValue::from_str(&list.join(", ")) {
        h.insert(X_FORWARDED_FOR, v);
    }
}

/// Headers that describe one connection, not the message (RFC 9110 section 7.6.1).
fn strip_hop_by_hop(h: &mut HeaderMap) {
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        h.remove(name);
    }
}

fn status(code: StatusCode, text: &'static str) -> Response<Body> {
    (code, text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_for_is_one_list() {
        let mut h = HeaderMap::new();
        forwarded_for(&mut h, "127.0.0.1");
        assert_eq!(h.get_all(X_FORWARDED_FOR).iter().count(), 1);
        assert_eq!(h[X_FORWARDED_FOR], "127.0.0.1");
        let mut h = HeaderMap::new();
        h.append(X_FORWARDED_FOR, HeaderValue::from_static("203.0.113.7"));
        h.append(
            X_FORWARDED_FOR,
            HeaderValue::from_static("198.51.100.2, 10.0.0.1"),
        );
        forwarded_for(&mut h, "127.0.0.1");
        let all: Vec<_> = h.get_all(X_FORWARDED_FOR).iter().collect();
        assert_eq!(all, ["203.0.113.7, 198.51.100.2, 10.0.0.1, 127.0.0.1"]);
    }
}
