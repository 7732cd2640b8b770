//! Load client for `make bench-envoy`: ShouldRateLimit calls with two descriptors (a user among
//! `--identities`, and one route) from `--concurrency` tasks over one HTTP/2 channel for
//! `--seconds`; prints requests per second and the codes seen.

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// The service's address, HOST:PORT.
    addr: String,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    #[arg(long, default_value_t = 10_000)]
    identities: u64,
    /// The domain the config defines `user` and `route` in.
    #[arg(long, default_value = "bench")]
    domain: String,
    /// Send this user in every request instead of `u<n>` for n below --identities.
    #[arg(long)]
    user: Option<String>,
}

fn descriptor(key: &str, value: String) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value,
        }],
        ..Default::default()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let client = RateLimitServiceClient::connect(format!("http://{}", args.addr)).await?;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|t| {
            let mut client = client.clone();
            let (domain, identities) = (args.domain.clone(), args.identities.max(1));
            let user = args.user.clone();
            tokio::spawn(async move {
                let (mut ok, mut over, mut errors) = (0u64, 0u64, 0u64);
                let mut i = t as u64;
                while Instant::now() < deadline {
                    i = i.wrapping_add(7919);
                    let req = RateLimitRequest {
                        domain: domain.clone(),
                        descriptors: vec![
                            descriptor(
                                "user",
                                user.clone()
                                    .unwrap_or_else(|| format!("u{}", i % identities)),
                            ),
                            descriptor("route", "api".into()),
                        ],
                        hits_addend: 1,
                    };
                    match client.should_rate_limit(req).await {
                        Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => ok += 1,
                        Ok(_) => over += 1,
                        Err(_) => errors += 1,
                    }
                }
                (ok, over, errors)
            })
        })
        .collect();
    let (mut ok, mut over, mut errors) = (0, 0, 0);
    for t in tasks {
        let (o, v, e) = t.await?;
        ok += o;
        over += v;
        errors += e;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{:.0} requests/s ({ok} OK, {over} OVER_LIMIT, {errors} errors in {secs:.1} s, {} concurrent calls, 2 descriptors each)",
        (ok + over + errors) as f64 / secs,
        args.concurrency
    );
    Ok(())
}
