//! `envoy-ratelimit healthcheck`: asks a running service's grpc.health.v1 Check, for images with
//! no shell or curl (a `HEALTHCHECK`). Exit status 0 when it answers SERVING, 1 otherwise, with a
//! line on stderr saying what it found.

use crate::cli::listen_addr;
use clap::Parser;
use slidingwindow_service::duration::parse_duration;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Asks the service at --listen (its own flag and GRPC_HOST/GRPC_PORT give the default; an
/// unspecified host such as 0.0.0.0 is asked on loopback) whether it is SERVING.
#[derive(Debug, Parser)]
#[command(
    name = "envoy-ratelimit healthcheck",
    bin_name = "envoy-ratelimit healthcheck"
)]
pub struct Args {
    /// The service's gRPC address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081", value_parser = listen_addr)]
    pub listen: SocketAddr,
    /// The service name asked about: "" (the server), "ratelimit" or its full name.
    #[arg(long, value_name = "NAME", default_value = "")]
    pub service: String,
    /// How long the connection and the answer may take.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub timeout: Duration,
}

pub async fn run(args: Args) -> ExitCode {
    match check(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("envoy-ratelimit healthcheck: {}: {e}", args.listen);
            ExitCode::FAILURE
        }
    }
}

async fn check(args: &Args) -> Result<(), String> {
    let addr = slidingwindow_service::dialable(args.listen);
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(args.timeout)
        .timeout(args.timeout);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let reply = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: args.service.clone(),
        })
        .await
        .map_err(|s| format!("Check: {} {}", s.code(), s.message()))?;
    match reply.into_inner().status() {
        ServingStatus::Serving => Ok(()),
        other => Err(format!("status {}", other.as_str_name())),
    }
}
