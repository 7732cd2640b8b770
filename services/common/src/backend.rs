//! The backend a service's calls take (the module's commands, or the Lua script on a server
//! without it: `--backend auto|module|script`), said at start, and its configuration errors: a
//! server that can run neither is not Redis being away. Such an error answers as
//! `--on-redis-error closed` would whatever that flag says (never unlimited), turns the health
//! status to NOT_SERVING until a call is answered again, is counted for `/metrics` and logged
//! with what to do.

use slidingwindow_client::{Backend, Client, Error, ErrorLog};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// `--backend`'s values.
pub fn parse(s: &str) -> Result<Backend, String> {
    s.parse()
        .map_err(|_| format!("{s:?}: expected auto, module or script"))
}

/// Says at start which backend calls take and why (stderr); the error when the service must not
/// start (the module forced where there is none, a script the server cannot
/// run). Redis away at start is no reason to stop: the path is then asked on the first call.
pub async fn start(program: &str, client: &Client) -> Result<(), String> {
    let chosen = client.chosen_backend();
    let line = match (chosen, client.backend().await) {
        (Backend::Auto, Ok(Backend::Module)) => {
            "backend module (auto: the server has the slidingwindow module)".to_string()
        }
        (Backend::Auto, Ok(_)) => format!(
            "backend script (auto: the server has no slidingwindow module; exact through the Lua \
             script; {NEEDS_MODULE})"
        ),
        (Backend::Module, Ok(_)) => "backend module (--backend module)".to_string(),
        (_, Ok(_)) => format!("backend script (--backend script; {NEEDS_MODULE})"),
        (_, Err(e @ Error::Config(_))) => return Err(e.to_string()),
        (chosen, Err(e)) => format!(
            "backend {chosen} (not checked: Redis did not answer ({e}); asked on the first call)"
        ),
    };
    eprintln!("{program}: {line}");
    Ok(())
}

/// What the script path lacks, as the start-up line names it.
const NEEDS_MODULE: &str = "the compact storage and SLIDINGWINDOW.TOP need the module; \
    the service's own top-refused metrics keep working";

/// The configuration errors calls met: on while the last call met one.
pub struct Misconfigured {
    on: AtomicBool,
    log: ErrorLog,
}

impl Misconfigured {
    pub fn new(program: &str) -> Misconfigured {
        Misconfigured {
            on: AtomicBool::new(false),
            log: ErrorLog::new(program, "the Redis backend"),
        }
    }

    /// Whether `e` is a configuration error; if so it is counted in `counter` (the service's
    /// metric), logged with `action` (what the service answers) and turns the flag on.
    pub fn found(&self, e: &Error, action: &str, counter: &AtomicU64) -> bool {
        if !matches!(e, Error::Config(_)) {
            return false;
        }
        counter.fetch_add(1, Ordering::Relaxed);
        self.on.store(true, Ordering::Relaxed);
        self.log.failed(action, e);
        true
    }

    /// A call was answered: the flag goes off (one log line if it was on).
    pub fn answered(&self) {
        if self.on.swap(false, Ordering::Relaxed) {
            self.log.succeeded();
        }
    }

    /// For a health check: while on, the server is asked again (`Client::backend`), and the flag
    /// goes off once it can run the calls.
    pub async fn recheck(&self, client: &Client) {
        if self.is_on() && client.backend().await.is_ok() {
            self.answered();
        }
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }
}
