//! What both services share: stopping on a signal, reading a duration flag, the syntax of the
//! rate-limit headers (IETF httpapi RateLimit draft), the address a healthcheck dials, the
//! Prometheus text of `/metrics`, and the backend (module or script) with its configuration
//! errors.

pub mod backend;
pub mod duration;
pub mod headers;
pub mod prometheus;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The address to reach a server listening on `addr` from the same host: an unspecified IP
/// (`0.0.0.0`, `::`) becomes its loopback.
pub fn dialable(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// Ctrl-C or SIGTERM: stop accepting, finish what is in flight.
pub async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dialable() {
        let d = |s: &str| super::dialable(s.parse().unwrap()).to_string();
        assert_eq!(d("0.0.0.0:8081"), "127.0.0.1:8081");
        assert_eq!(d("[::]:1"), "[::1]:1");
        assert_eq!(d("10.0.0.1:2"), "10.0.0.1:2");
    }
}
