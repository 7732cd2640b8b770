//! What both services share: stopping on a signal, reading a duration flag, the syntax of
//! the rate-limit headers (IETF httpapi RateLimit draft), and the Prometheus text of `/metrics`.

pub mod duration;
pub mod headers;
pub mod prometheus;

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
