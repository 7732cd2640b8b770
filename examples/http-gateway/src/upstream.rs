//! What admitted requests reach: a reverse proxy to --upstream, or a built-in `200 ok`.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri, header};
use axum::response::IntoResponse;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::Arc;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

#[derive(Clone)]
pub enum Upstream {
    Ok,
    Proxy(Arc<Proxy>),
}

pub struct Proxy {
    client: Client<HttpConnector, Body>,
    base: Uri,
}

impl Upstream {
    pub fn new(base: Option<Uri>) -> Upstream {
        match base {
            None => Upstream::Ok,
            Some(base) => {
                // As for the listener: no Nagle delay on small requests.
                let mut connector = HttpConnector::new();
                connector.set_nodelay(true);
                Upstream::Proxy(Arc::new(Proxy {
                    client: Client::builder(TokioExecutor::new()).build(connector),
                    base,
                }))
            }
        }
    }

    pub async fn handle(self, req: Request<Body>) -> Response<Body> {
        match self {
            Upstream::Ok => (StatusCode::OK, "ok\n").into_response(),
            Upstream::Proxy(p) => forward(&p.client, &p.base, req).await,
        }
    }
}

async fn forward(
    client: &Client<HttpConnector, Body>,
    base: &Uri,
    mut req: Request<Body>,
) -> Response<Body> {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let prefix = base.path().trim_end_matches('/');
    let uri = Uri::builder()
        .scheme("http")
        .authority(base.authority().map_or("", |a| a.as_str()))
        .path_and_query(format!("{prefix}{path}"))
        .build();
    let Ok(uri) = uri else {
        return status(StatusCode::BAD_REQUEST, "bad request path\n");
    };
    *req.uri_mut() = uri;
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let headers = req.headers_mut();
    strip_hop_by_hop(headers);
    // The client sets Host from the upstream URI.
    headers.remove(header::HOST);
    if let Some(ip) = peer.and_then(|ip| HeaderValue::from_str(&ip.to_string()).ok()) {
        headers.append(X_FORWARDED_FOR, ip);
    }
    match client.request(req).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
        Err(err) => {
            eprintln!("gateway: upstream {base}: {err}");
            status(StatusCode::BAD_GATEWAY, "upstream unreachable\n")
        }
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
