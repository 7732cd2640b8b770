//! An Envoy rate limit service on SLIDINGWINDOW.ALLOWALL and REFUND: see README.md.

mod cli;
mod config;
mod headers;
mod plan;
mod response;
mod service;
mod store;

use clap::Parser;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use std::io::Write;
use std::process::ExitCode;
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let Err(e) = cli.validate() {
        eprintln!("envoy-ratelimit: {e}");
        return ExitCode::from(2);
    }
    let config = match config::Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("envoy-ratelimit: config error: {e}");
            return ExitCode::from(2);
        }
    };
    if !config.ignored.is_empty() {
        eprintln!(
            "envoy-ratelimit: warning: ignoring fields this service does not implement: {}",
            config.ignored.join(", ")
        );
    }
    match run(cli, config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("envoy-ratelimit: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: cli::Cli, config: config::Config) -> Result<(), Box<dyn std::error::Error>> {
    let service = service::Service {
        config,
        store: store::Store::new(&cli.redis, cli.cluster)?,
        on_error: cli.on_redis_error,
        headers: cli.response_headers,
        failures: slidingwindow_client::ErrorLog::new("envoy-ratelimit", "redis"),
    };
    let listener = TcpListener::bind(cli.listen).await?;
    // Tests and scripts read the address (the port may have been 0) from this first line.
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .add_service(RateLimitServiceServer::new(service))
        .serve_with_incoming_shutdown(incoming, shutdown())
        .await?;
    Ok(())
}

/// Ctrl-C or SIGTERM: stop accepting, finish what is in flight.
async fn shutdown() {
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
