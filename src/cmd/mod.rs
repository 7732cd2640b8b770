//! The commands: registration, and the dispatcher that runs a body with panics contained and
//! publishes whatever it changed from outside the unwind boundary.

mod allow;
mod allowall;
mod apply;
pub mod config;
mod convert;
#[cfg(feature = "panic-test")]
mod debug;
mod docs;
mod peek;
mod peekall;
mod refund;
mod request;
mod stats;
mod top;

use crate::core::error::Error;
use crate::core::reply::{Detail, Reply};
use crate::core::top::Entry;
use crate::core::window::Outcome;
use crate::ffi::{Access, Argv, Ctx, Handler, Keys, Loader, Spec, counted_handler, handler};
use crate::store::Changes;
use crate::store::compact::log::CompactLog;
use stats::Counter;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What a command answers when it succeeds.
pub enum Answer {
    Fields(Reply),
    /// With `DETAIL`: eight elements, every limit's state among them.
    Detailed(Reply, Detail),
    Integer(i64),
    /// `TOP`'s entries: `[key, refused, error]` each.
    Top(Vec<Entry>),
    /// `+OK`.
    Ok,
}

impl Answer {
    /// A decided call's reply, with its detail if it asked for one.
    fn of(outcome: Outcome) -> Answer {
        match outcome.detail {
            Some(detail) => Answer::Detailed(outcome.reply, detail),
            None => Answer::Fields(outcome.reply),
        }
    }

    /// A count of logged requests (at most 2^53 in practice; saturated, never wrapped).
    fn count(n: u64) -> Answer {
        Answer::Integer(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

type Body = for<'a> fn(Ctx<'a>, Argv<'a>, &mut Changes<'a>) -> Result<Answer, Error>;

/// Runs `body` with panics contained: a bug answers an error instead of aborting the server, and
/// every change made before it still reaches replicas and the AOF. Counts the answer for INFO:
/// in `calls` (if any), or as an error.
fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, body: Body, calls: Option<&'static Counter>) {
    let mut fx = Changes::default();
    let result = catch_unwind(AssertUnwindSafe(|| body(ctx, argv, &mut fx)));
    let published = catch_unwind(AssertUnwindSafe(|| fx.publish(ctx)));
    let answer = match (result, published) {
        (Err(_), _) | (_, Err(_)) => Err(Error::Panic),
        (Ok(answer), Ok(published)) => published.and(answer),
    };
    match (&answer, calls) {
        (Ok(_), Some(calls)) => calls.add(1),
        (Ok(_), None) => {}
        (Err(_), _) => stats::ERRORS.add(1),
    }
    match answer {
        Ok(Answer::Fields(reply)) => ctx.reply_ints(&reply.fields()),
        Ok(Answer::Detailed(reply, detail)) => {
            // allowed, count, remaining, retry, reset, b, [[count remaining retry reset]...], now
            ctx.reply_array(8);
            for &v in reply.named_fields().iter() {
                ctx.reply_int(v);
            }
            ctx.reply_array(detail.limits.len());
            for limit in &detail.limits {
                ctx.reply_ints(&limit.fields());
            }
            ctx.reply_int(detail.now_field());
        }
        Ok(Answer::Integer(n)) => ctx.reply_int(n),
        Ok(Answer::Top(entries)) => {
            ctx.reply_array(entries.len());
            for e in &entries {
                ctx.reply_array(3);
                ctx.reply_bytes(&e.name);
                ctx.reply_int(i64::try_from(e.count).unwrap_or(i64::MAX));
                ctx.reply_int(i64::try_from(e.error).unwrap_or(i64::MAX));
            }
        }
        Ok(Answer::Ok) => ctx.reply_ok(),
        Err(err) => ctx.reply_error(&err),
    }
}

/// A `Handler` for each command body, with the INFO counter of its answered calls.
macro_rules! handlers {
    ($($name:ident => $body:path, $calls:expr;)*) => {$(
        struct $name;
        impl Handler for $name {
            fn call<'a>(ctx: Ctx<'a>, argv: Argv<'a>) {
                run(ctx, argv, $body, $calls);
            }
        }
    )*};
}

handlers! {
    Allow => allow::run, Some(&stats::ALLOW_CALLS);
    Peek => peek::run, Some(&stats::PEEK_CALLS);
    AllowAll => allowall::run, Some(&stats::ALLOW_CALLS);
    PeekAll => peekall::run, Some(&stats::PEEK_CALLS);
    Refund => refund::run, Some(&stats::REFUND_CALLS);
    Convert => convert::run, None;
    Apply => apply::run, None;
    Top => top::run, None;
    TopReset => top::reset, None;
}

/// Commands whose effects the module replicates as themselves, or calls in place.
const NEEDED: [&std::ffi::CStr; 7] = [
    c"ZADD",
    c"ZREM",
    c"ZREMRANGEBYSCORE",
    c"UNLINK",
    c"PEXPIREAT",
    c"ZRANGE",
    c"ZCOUNT",
];

/// Registers the commands. `write deny-oom` for ALLOW (refused on replicas and when out of
/// memory), `readonly` for PEEK; both take their key at position 1.
///
/// ACL categories: ALLOW is `write slow` like ZREMRANGEBYSCORE (O(log N + M): it removes every
/// member that left the window, and adds up to `max-members-per-call`); PEEK is `read fast` like
/// ZCOUNT (O(log N): it only counts and looks up ranks). All are in `@slidingwindow` too.
pub fn register(loader: &Loader, args: &[&[u8]]) -> Result<(), String> {
    for name in NEEDED {
        if !loader.command_exists(name) {
            return Err(format!(
                "the server has no {} command (renamed or disabled?): slidingwindow needs it",
                name.to_string_lossy()
            ));
        }
    }
    loader.set_module_options()?;
    loader.data_type::<CompactLog>()?;
    config::register(loader, args)?;
    stats::register(loader)?;
    let category = loader.acl_category(c"slidingwindow");
    let specs = [
        Spec {
            name: c"slidingwindow.allow",
            handler: handler::<Allow>(),
            flags: c"write deny-oom",
            access: Access::Update,
            keys: Keys::One,
            summary: c"Trims the sliding-window log, counts it, and logs the request if it fits",
            complexity: c"O(log N + M): N members in the window, M members trimmed",
            arity: -5,
            args: &docs::WINDOW_ARGS,
            acl: c"write slow",
        },
        Spec {
            name: c"slidingwindow.peek",
            handler: handler::<Peek>(),
            flags: c"readonly",
            access: Access::Read,
            keys: Keys::One,
            summary: c"Answers what SLIDINGWINDOW.ALLOW would, changing nothing",
            complexity: c"O(log N): N members in the window",
            arity: -5,
            args: &docs::WINDOW_ARGS,
            acl: c"read fast",
        },
        Spec {
            name: c"slidingwindow.allowall",
            handler: counted_handler::<AllowAll>(),
            flags: c"write deny-oom",
            access: Access::Update,
            keys: Keys::Counted,
            summary: c"Checks one request against the limits of several keys, and logs it in every key only if it fits them all",
            complexity: c"O(K log N + M): K keys, N members in a key's window, M members trimmed",
            arity: -8,
            args: &docs::ALL_ARGS,
            acl: c"write slow",
        },
        Spec {
            name: c"slidingwindow.peekall",
            handler: counted_handler::<PeekAll>(),
            flags: c"readonly",
            access: Access::Read,
            keys: Keys::Counted,
            summary: c"Answers what SLIDINGWINDOW.ALLOWALL would, changing nothing",
            complexity: c"O(K log N): K keys, N members in a key's window",
            arity: -8,
            args: &docs::ALL_ARGS,
            acl: c"read fast",
        },
        Spec {
            name: c"slidingwindow.refund",
            handler: handler::<Refund>(),
            // No deny-oom: it frees memory.
            flags: c"write",
            access: Access::Update,
            keys: Keys::One,
            summary: c"Takes back up to n logged requests, the newest at or before a time",
            complexity: c"O(log N + M): N members in the log, M members removed",
            arity: -3,
            args: &docs::REFUND_ARGS,
            acl: c"write slow",
        },
        Spec {
            name: c"slidingwindow.convert",
            handler: handler::<Convert>(),
            flags: c"write deny-oom",
            access: Access::Update,
            keys: Keys::One,
            summary: c"Moves a key's log to the other storage (zset or compact), keeping its timestamps and TTL",
            complexity: c"O(N log N) for N logged requests",
            arity: 3,
            args: &docs::CONVERT_ARGS,
            acl: c"write slow",
        },
        Spec {
            name: c"slidingwindow.apply",
            handler: handler::<Apply>(),
            flags: c"write deny-oom",
            access: Access::Update,
            keys: Keys::One,
            summary: c"Internal: replays a resolved change of a compact log (replication and AOF)",
            complexity: c"O(log N + M) for M timestamps added or trimmed",
            arity: 3,
            args: &docs::APPLY_ARGS,
            // It writes any log it is given, like RESTORE: kept from roles without @dangerous.
            acl: c"write slow dangerous",
        },
        Spec {
            name: c"slidingwindow.top",
            handler: handler::<Top>(),
            flags: c"readonly",
            access: Access::Read,
            keys: Keys::None,
            summary: c"Lists the keys ALLOW and ALLOWALL refused most since the last reset, with each estimate's error",
            complexity: c"O(T + k log k): T the summary's entries (slidingwindow.top-keys), k listed",
            arity: -1,
            args: &docs::TOP_ARGS,
            acl: c"read slow",
        },
        Spec {
            name: c"slidingwindow.topreset",
            handler: handler::<TopReset>(),
            flags: c"",
            access: Access::Read,
            keys: Keys::None,
            summary: c"Empties the summary of refused keys behind SLIDINGWINDOW.TOP",
            complexity: c"O(T): T the summary's entries",
            arity: 1,
            args: &[],
            acl: c"admin dangerous",
        },
    ];
    for spec in &specs {
        loader.create_command(spec, category)?;
    }
    #[cfg(feature = "panic-test")]
    loader.create_command(&debug::spec(), None)?;
    Ok(())
}
