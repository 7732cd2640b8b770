//! An HTTP gateway that rate-limits every request with SLIDINGWINDOW.ALLOW: see README.md.
// The compiler's layout of the nested request futures (layer, limiter, client) goes past 128.
#![recursion_limit = "256"]

mod abandoned;
mod admissions;
mod config;
mod deny_cache;
mod headers;
mod healthcheck;
mod identity;
mod inflight;
mod layer;
mod limiter;
mod metrics;
mod upstream;
mod wrap;

use axum::Router;
use axum::serve::ListenerExt;
use clap::Parser;
use config::Config;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "healthcheck") {
        args.remove(0);
        return healthcheck::run(healthcheck::Args::parse_from(args));
    }
    let cfg = Config::parse_from(args);
    if let Err(e) = cfg.validate() {
        eprintln!("gateway: {e}");
        return ExitCode::from(2);
    }
    match run(cfg).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn healthy(limiter: Option<Arc<limiter::Limiter>>) -> axum::response::Response {
    use axum::response::IntoResponse;
    if let Some(l) = limiter {
        l.misconfigured.recheck(l.client()).await;
        if l.misconfigured.is_on() {
            return (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "the Redis backend cannot run the calls (see the log)",
            )
                .into_response();
        }
    }
    "ok".into_response()
}

async fn run(cfg: Config) -> Result<(), Box<dyn std::error::Error>> {
    let target = upstream::Upstream::new(cfg.upstream.clone(), cfg.upstream_timeout);
    let metrics = Arc::new(metrics::Metrics::new(cfg.metrics_top));
    let counted = metrics.clone();
    let mut app = Router::new().fallback(move |req| {
        counted.admitted();
        target.clone().handle(req)
    });
    if let Some(i) = inflight::Inflight::new(&cfg, metrics.clone())? {
        app = app.layer(wrap::Wrap(Arc::new(i)));
    }
    let mut limiter = None;
    if cfg.limits.is_empty() && cfg.tenant_limits.is_empty() && cfg.global_limits.is_empty() {
        eprintln!("gateway: no --limit given: requests are not rate limited");
    } else {
        let l = Arc::new(limiter::Limiter::new(&cfg, metrics.clone())?);
        slidingwindow_service::backend::start("gateway", l.client()).await?;
        if let Some(p) = cfg.precision
            && let Some(w) = l.client().precision_warning(limiter::GLOBAL_KEY).await
        {
            eprintln!("gateway: warning: --precision {p}: {w}");
        }
        app = app.layer(wrap::Wrap(Arc::new(layer::RateLimitLayer::new(
            l.clone(),
            &cfg,
            metrics.clone(),
        ))));
        limiter = Some(l);
    }
    if let Some(addr) = cfg.metrics_listen {
        let l = TcpListener::bind(addr).await?;
        // Tests read the address (the port may have been 0) from this line.
        eprintln!("metrics on http://{}", l.local_addr()?);
        let router = metrics::router(metrics.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(l, router).await {
                eprintln!("gateway: /metrics: {e}");
            }
        });
    }
    // Added after the in-flight and rate-limit layers, which wrap only the routes before them.
    // 503 while the last call met a configuration error (the server asked again at each check).
    if let Some(path) = &cfg.health_path {
        let checked = limiter.clone();
        app = app.route(path, axum::routing::get(move || healthy(checked.clone())));
    }
    let listener = TcpListener::bind(cfg.listen).await?;
    // Tests and scripts read the address (the port may have been 0) from this first line.
    println!("listening on http://{}", listener.local_addr()?);
    // Small responses go out at once rather than waiting for the client's delayed ACK (Nagle).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(slidingwindow_service::shutdown())
    .await?;
    // Every request has been answered: refunds under way end, then the leases' unused permits go
    // back.
    if let Some(l) = limiter {
        l.shutdown(cfg.upstream_timeout + limiter::REQUEST_DEADLINE)
            .await;
    }
    Ok(())
}
