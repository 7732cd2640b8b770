//! An Envoy rate limit service on SLIDINGWINDOW.ALLOWALL and REFUND: see README.md.
// The compiler's layout of the nested request futures (gRPC, store, client) goes past 128.
#![recursion_limit = "256"]

mod cli;
mod config;
mod env;
mod headers;
mod health;
mod healthcheck;
mod http;
mod leases;
mod metrics;
mod plan;
mod reload;
mod response;
mod row;
mod service;
mod stat;
mod store;
mod yaml;

use clap::{CommandFactory, FromArgMatches};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use slidingwindow_client::{Auth, Options};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

// glibc's malloc and free took 12 to 15% of the service's CPU under load (`perf`); with
// mimalloc a counted request costs it about 9% less CPU (README, "Tests and load check").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let defaults = match env::read(|name| std::env::var(name).ok()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("envoy-ratelimit: {e}");
            return ExitCode::from(2);
        }
    };
    let mut args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "healthcheck") {
        args.remove(0);
        let cmd = env::apply(healthcheck::Args::command(), &defaults);
        return healthcheck::run(parse(cmd, args)).await;
    }
    for w in &defaults.warnings {
        eprintln!("envoy-ratelimit: warning: {w}");
    }
    let cli: cli::Cli = parse(env::apply(cli::Cli::command(), &defaults), args);
    #[cfg(feature = "bench-floor")]
    eprintln!(
        "envoy-ratelimit: a bench-floor build: one PING in place of each request's calls, nothing is limited"
    );
    if let Err(e) = cli.validate() {
        eprintln!("envoy-ratelimit: {e}");
        return ExitCode::from(2);
    }
    let source = config::source::Files {
        path: cli.config.clone(),
        merge: cli.merge_domain_config,
    };
    let config = match source.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("envoy-ratelimit: config error: {e}");
            return ExitCode::from(2);
        }
    };
    config::warn_ignored(&config);
    match run(cli, config, source).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("envoy-ratelimit: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `T` from `args` by `cmd` (T's command with env.rs's defaults); exits on a bad command line.
fn parse<T: FromArgMatches>(cmd: clap::Command, args: Vec<std::ffi::OsString>) -> T {
    T::from_arg_matches(&cmd.get_matches_from(args)).unwrap_or_else(|e| e.exit())
}

fn redis_options(cli: &cli::Cli) -> Result<Options, slidingwindow_client::Error> {
    let options = match &cli.sentinel {
        Some(name) => {
            Options::sentinel(name, &cli.redis, cli.redis_auth.as_deref().map(Auth::parse))?
        }
        None => Options::from_urls(&cli.redis, cli.cluster)?,
    };
    Ok(options
        .ca_file(cli.redis_ca_file.clone())
        .backend(cli.backend))
}

async fn run(
    cli: cli::Cli,
    config: config::Config,
    source: config::source::Files,
) -> Result<(), Box<dyn std::error::Error>> {
    let metrics = Arc::new(metrics::Metrics::new(cli.near_limit_ratio).with_top(cli.metrics_top));
    metrics.config_load_success.fetch_add(1, Ordering::Relaxed);
    let forms = response::HeaderForms {
        draft: cli.response_headers,
        reference: cli.limit_response_headers.then(|| headers::HeaderNames {
            limit: cli.limit_limit_header.clone(),
            remaining: cli.limit_remaining_header.clone(),
            reset: cli.limit_reset_header.clone(),
        }),
    };
    let store = store::Store::new(redis_options(&cli)?)?;
    slidingwindow_service::backend::start("envoy-ratelimit", store.client()).await?;
    let shared = Arc::new(service::Shared::new(
        config,
        store,
        metrics,
        cli.on_redis_error,
        forms,
        cli.key_prefix.clone(),
    )?);
    let (config, _) = shared.live();
    shared.warn_precision(&config).await;
    let listener = TcpListener::bind(cli.listen).await?;
    let http = match cli.http_listen {
        Some(addr) => Some(TcpListener::bind(addr).await?),
        None => None,
    };
    let prometheus = match cli.metrics_listen {
        Some(addr) => Some(TcpListener::bind(addr).await?),
        None => None,
    };
    // Tests and scripts read the addresses (a port may have been 0) from these lines, the gRPC
    // one first.
    println!("listening on {}", listener.local_addr()?);
    if let Some(l) = &http {
        println!("http on {}", l.local_addr()?);
    }
    if let Some(l) = &prometheus {
        println!("metrics on {}", l.local_addr()?);
    }
    std::io::stdout().flush()?;
    if let Some(l) = http {
        tokio::spawn(serve(l, http::api(shared.clone())));
    }
    if let Some(l) = prometheus {
        tokio::spawn(serve(l, http::metrics(shared.clone())));
    }
    tokio::spawn(reload::watch(shared.clone(), source, cli.reload_interval));
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let mut reported = None;
    health::report(&shared, &reporter, &mut reported).await;
    tokio::spawn(health::run(
        shared.clone(),
        reporter.clone(),
        cli.health_interval,
    ));
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let stopping = shared.clone();
    let closing = shared.clone();
    Server::builder()
        .add_service(health_service)
        .add_service(RateLimitServiceServer::new(service::Service(shared)))
        .serve_with_incoming_shutdown(incoming, async move {
            slidingwindow_service::shutdown().await;
            // NOT_SERVING from SIGTERM on, as the reference reports it.
            stopping.stopping.store(true, Ordering::Relaxed);
            health::report(&stopping, &reporter, &mut reported).await;
        })
        .await?;
    closing.close_leases().await;
    Ok(())
}

async fn serve(listener: TcpListener, router: axum::Router) {
    if let Err(e) = axum::serve(listener, router).await {
        eprintln!("envoy-ratelimit: http: {e}");
    }
}
