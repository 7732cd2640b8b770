//! grpc.health.v1.Health: SERVING while a config is loaded (always, once started: a bad reload
//! keeps the last good one) and Redis answers with a backend that runs (no configuration error
//! since the last answered call), NOT_SERVING from SIGTERM on. Redis is pinged every
//! `--health-interval` (and, after a configuration error, asked whether it can run the calls
//! now); a request that finds Redis failing (or answering again) changes the status at once.

use crate::service::Shared;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::SERVICE_NAME;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// The names a health check may ask about: the server as a whole (""), the reference's
/// "ratelimit", and the rate limit service's full name.
const NAMES: [&str; 3] = ["", "ratelimit", SERVICE_NAME];

pub async fn run(shared: Arc<Shared>, reporter: HealthReporter, interval: Duration) {
    let mut reported = None;
    loop {
        // A ping that does not answer within the interval counts as a failure.
        let up = matches!(
            tokio::time::timeout(
                interval.max(Duration::from_millis(100)),
                shared.store.ping()
            )
            .await,
            Ok(Ok(()))
        );
        shared.redis_up.store(up, Ordering::Relaxed);
        if up {
            shared.misconfigured.recheck(shared.store.client()).await;
        }
        report(&shared, &reporter, &mut reported).await;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shared.health_changed.notified() => report(&shared, &reporter, &mut reported).await,
        }
    }
}

/// Sets the status of every name when it changed.
pub async fn report(
    shared: &Shared,
    reporter: &HealthReporter,
    reported: &mut Option<ServingStatus>,
) {
    let serving = shared.serving();
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    if *reported != Some(status) {
        for name in NAMES {
            reporter.set_service_status(name, status).await;
        }
        *reported = Some(status);
    }
}
