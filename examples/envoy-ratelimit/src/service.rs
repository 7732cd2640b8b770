//! The gRPC service: ShouldRateLimit.

use crate::cli::OnRedisError;
use crate::config::Config;
use crate::plan::{self, Action};
use crate::response;
use crate::store::Store;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use slidingwindow_client::{ErrorLog, unix_ms};
use tonic::{Request, Response, Status};

pub struct Service {
    pub config: Config,
    pub store: Store,
    pub on_error: OnRedisError,
    pub headers: bool,
    pub failures: ErrorLog,
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let req = request.into_inner();
        if req.domain.is_empty() {
            return Err(Status::invalid_argument("domain must not be empty"));
        }
        if req.descriptors.is_empty() {
            return Err(Status::invalid_argument("descriptors must not be empty"));
        }
        let actions = plan::actions(&self.config, &req.domain, req.hits_addend, &req.descriptors);
        let charge = !actions.iter().any(Action::refuses_all);
        // The service's clock, passed to every call: the refunds' AT and the statuses use it too.
        let now = unix_ms();
        let outcome = match self.store.run(&actions, charge, now).await {
            Ok(o) => {
                self.failures.succeeded();
                Some(o)
            }
            Err(e) => {
                let action = match self.on_error {
                    OnRedisError::Open => "answering OK",
                    OnRedisError::Closed => "answering OVER_LIMIT",
                };
                self.failures.failed(action, &e);
                None
            }
        };
        let rows = response::rows(&actions, outcome.as_ref(), self.on_error);
        Ok(Response::new(response::response(
            &rows,
            self.headers && outcome.is_some(),
        )))
    }
}
