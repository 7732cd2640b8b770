//! Load client for `make bench-envoy`: ShouldRateLimit calls with `--descriptors` descriptors (a
//! user among `--identities`, then routes `api`, `api1`, ...) from `--concurrency` tasks over one
//! HTTP/2 channel for `--seconds` (`--unlimited` or `--leased`: the bench config's keys of that
//! kind); prints requests per second, the codes seen and the median and 99th percentile latency.
//! With `--fixed-window REDIS_URL` the same requests go to Redis instead of the service, as
//! envoyproxy/ratelimit's fixed window sends them: one pipeline a request, INCRBY and EXPIRE on
//! each descriptor's key for the current window (the user a minute of 1,000,000, a route a
//! second of 1,000,000: the bench config's limits), OVER_LIMIT when a count passes its limit.

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
    /// Descriptors per request: the user, then routes.
    #[arg(long, default_value_t = 2)]
    descriptors: usize,
    /// Use the keys `free_user` and `free_route` (unlimited in the bench's config) instead.
    #[arg(long)]
    unlimited: bool,
    /// Use the keys `leased_user` and `leased_route` (with `lease` in the bench's config).
    #[arg(long, conflicts_with = "unlimited")]
    leased: bool,
    /// Send envoyproxy/ratelimit's fixed-window pipeline to this Redis instead (ADDR unused).
    #[arg(long, conflicts_with_all = ["unlimited", "leased"])]
    fixed_window: Option<String>,
}

/// Where the requests go: the service, or Redis as the reference's fixed window.
#[derive(Clone)]
enum Target {
    Service(RateLimitServiceClient<tonic::transport::Channel>),
    FixedWindow(redis::aio::MultiplexedConnection),
}

/// The bench config's limits of `user` and `route`: (window in seconds, requests in it).
const FIXED_LIMITS: [(u64, i64); 2] = [(60, 1_000_000), (1, 1_000_000)];

/// Whether the fixed window admits a request: one pipeline of INCRBY and EXPIRE for each
/// descriptor (key `domain_key_value_windowstart`), refused when any count passes its limit.
async fn fixed_window(
    redis: &mut redis::aio::MultiplexedConnection,
    domain: &str,
    descriptors: &[RateLimitDescriptor],
) -> redis::RedisResult<bool> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut pipe = redis::pipe();
    let mut limits = Vec::with_capacity(descriptors.len());
    for (i, d) in descriptors.iter().enumerate() {
        let (window, limit) = FIXED_LIMITS[i.min(1)];
        let e = &d.entries[0];
        let key = format!("{domain}_{}_{}_{}", e.key, e.value, now / window * window);
        pipe.cmd("INCRBY")
            .arg(&key)
            .arg(1)
            .cmd("EXPIRE")
            .arg(&key)
            .arg(window)
            .ignore();
        limits.push(limit);
    }
    let counts: Vec<i64> = pipe.query_async(redis).await?;
    Ok(counts.iter().zip(&limits).all(|(c, l)| c <= l))
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
    let target = match &args.fixed_window {
        Some(url) => Target::FixedWindow(
            redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        ),
        None => {
            Target::Service(RateLimitServiceClient::connect(format!("http://{}", args.addr)).await?)
        }
    };
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let start = Instant::now();
    let (user_key, route_key) = if args.unlimited {
        ("free_user", "free_route")
    } else if args.leased {
        ("leased_user", "leased_route")
    } else {
        ("user", "route")
    };
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|t| {
            let mut target = target.clone();
            let (domain, identities) = (args.domain.clone(), args.identities.max(1));
            let (user, count) = (args.user.clone(), args.descriptors.max(1));
            tokio::spawn(async move {
                let (mut ok, mut over, mut errors) = (0u64, 0u64, 0u64);
                let mut latencies = Vec::new();
                let mut i = t as u64;
                while Instant::now() < deadline {
                    i = i.wrapping_add(7919);
                    let mut descriptors = vec![descriptor(
                        user_key,
                        user.clone()
                            .unwrap_or_else(|| format!("u{}", i % identities)),
                    )];
                    descriptors.extend((1..count).map(|j| {
                        let route = if j == 1 {
                            "api".to_string()
                        } else {
                            format!("api{j}")
                        };
                        descriptor(route_key, route)
                    }));
                    let req = RateLimitRequest {
                        domain: domain.clone(),
                        descriptors,
                        hits_addend: 1,
                    };
                    let sent = Instant::now();
                    let answer = match &mut target {
                        Target::Service(c) => c
                            .should_rate_limit(req)
                            .await
                            .map(|r| r.get_ref().overall_code == Code::Ok as i32)
                            .map_err(|_| ()),
                        Target::FixedWindow(r) => fixed_window(r, &req.domain, &req.descriptors)
                            .await
                            .map_err(|_| ()),
                    };
                    latencies.push(sent.elapsed());
                    match answer {
                        Ok(true) => ok += 1,
                        Ok(false) => over += 1,
                        Err(()) => errors += 1,
                    }
                }
                (ok, over, errors, latencies)
            })
        })
        .collect();
    let (mut ok, mut over, mut errors) = (0, 0, 0);
    let mut latencies = Vec::new();
    for t in tasks {
        let (o, v, e, l) = t.await?;
        ok += o;
        over += v;
        errors += e;
        latencies.extend(l);
    }
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * q).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{:.0} requests/s, p50 {:.3} ms, p99 {:.3} ms ({ok} OK, {over} OVER_LIMIT, {errors} errors in {secs:.1} s, {} concurrent calls, {} descriptors each)",
        (ok + over + errors) as f64 / secs,
        at(0.5),
        at(0.99),
        args.concurrency,
        args.descriptors.max(1)
    );
    Ok(())
}
