//! The commands: registration, and the dispatcher that runs a body with panics contained and
//! publishes whatever it changed from outside the unwind boundary.

mod allow;
mod allowall;
mod apply;
pub mod config;
mod convert;
#[cfg(feature = "panic-test")]
mod debug;
mod peek;
mod peekall;
mod refund;
mod request;
mod stats;
mod table;
mod top;

use crate::core::error::Error;
use crate::core::reply::{Detail, Reply};
use crate::core::top::Entry;
use crate::core::window::Outcome;
use crate::ffi::{Argv, Ctx, Handler, Keys, Loader, Spec, counted_handler, handler};
use crate::store::{self, Changes};
use stats::Counter;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use table::Command;

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
    // Emptied by `discard` once published, then never dropped: no drop glue on the hot path.
    let mut fx = ManuallyDrop::new(Changes::default());
    let result = catch_unwind(AssertUnwindSafe(|| body(ctx, argv, &mut fx)));
    let published = catch_unwind(AssertUnwindSafe(|| fx.publish(ctx)));
    fx.discard();
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
        // ALLOW's and PEEK's usual answer, the only one built here: every other one is out of
        // line, so the common call's code stays together.
        Ok(Answer::Fields(reply)) => ctx.reply_ints(&reply.fields()),
        Ok(other) => reply_other(ctx, other),
        Err(err) => reply_error(ctx, &err),
    }
}

/// Replies with any answer but `Fields`.
#[inline(never)]
fn reply_other(ctx: Ctx<'_>, answer: Answer) {
    match answer {
        Answer::Fields(reply) => ctx.reply_ints(&reply.fields()),
        Answer::Detailed(reply, detail) => {
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
        Answer::Integer(n) => ctx.reply_int(n),
        Answer::Top(entries) => {
            ctx.reply_array(entries.len());
            for e in &entries {
                ctx.reply_array(3);
                ctx.reply_bytes(&e.name);
                ctx.reply_int(i64::try_from(e.count).unwrap_or(i64::MAX));
                ctx.reply_int(i64::try_from(e.error).unwrap_or(i64::MAX));
            }
        }
        Answer::Ok => ctx.reply_ok(),
    }
}

/// Replies with `err`.
#[cold]
#[inline(never)]
fn reply_error(ctx: Ctx<'_>, err: &Error) {
    ctx.reply_error(err);
}

/// A `Handler` for each command body, with the INFO counter of its answered calls, and
/// `spec_of`, which joins a command of the table to its handler by name.
macro_rules! handlers {
    ($($name:ident = $command:literal => $body:path, $calls:expr;)*) => {
        $(
            struct $name;
            impl Handler for $name {
                fn call<'a>(ctx: Ctx<'a>, argv: Argv<'a>) {
                    run(ctx, argv, $body, $calls);
                }
            }
        )*

        /// The command to register for `entry`: its data and its handler; `None` for a name
        /// no handler answers to.
        fn spec_of(entry: &'static Command) -> Option<Spec> {
            match entry.name.to_bytes() {
                $($command => Some(spec::<$name>(entry)),)*
                _ => None,
            }
        }

        /// The names the handlers answer to.
        #[cfg(test)]
        const HANDLED: &[&[u8]] = &[$($command),*];
    };
}

handlers! {
    Allow = b"slidingwindow.allow" => allow::run, Some(&stats::ALLOW_CALLS);
    Peek = b"slidingwindow.peek" => peek::run, Some(&stats::PEEK_CALLS);
    AllowAll = b"slidingwindow.allowall" => allowall::run, Some(&stats::ALLOW_CALLS);
    PeekAll = b"slidingwindow.peekall" => peekall::run, Some(&stats::PEEK_CALLS);
    Refund = b"slidingwindow.refund" => refund::run, Some(&stats::REFUND_CALLS);
    Convert = b"slidingwindow.convert" => convert::run, None;
    Apply = b"slidingwindow.apply" => apply::run, None;
    ApplyShort = b"sw.apply" => apply::run, None;
    Top = b"slidingwindow.top" => top::run, None;
    TopReset = b"slidingwindow.topreset" => top::reset, None;
}

/// `entry` with `H` as its handler: counted keys take the callback that answers key-position
/// requests.
fn spec<H: Handler>(entry: &'static Command) -> Spec {
    Spec {
        name: entry.name,
        handler: match entry.keys {
            Keys::Counted => counted_handler::<H>(),
            Keys::One | Keys::None => handler::<H>(),
        },
        flags: entry.flags,
        access: entry.access,
        keys: entry.keys,
        summary: entry.summary,
        complexity: entry.complexity,
        arity: entry.arity,
        args: entry.args,
        acl: entry.acl,
    }
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

/// Registers the commands of the table (`commands.json`). `write deny-oom` for ALLOW (refused on
/// replicas and when out of memory), `readonly` for PEEK; both take their key at position 1.
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
    store::register(loader)?;
    config::register(loader, args)?;
    stats::register(loader)?;
    let category = loader.acl_category(c"slidingwindow");
    for entry in &table::COMMANDS {
        let spec = spec_of(entry).ok_or_else(|| {
            format!(
                "no handler for {} (src/cmd/commands.json)",
                entry.name.to_string_lossy()
            )
        })?;
        loader.create_command(&spec, category)?;
    }
    #[cfg(feature = "panic-test")]
    loader.create_command(&debug::spec(), None)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{HANDLED, table};

    /// Registration joins the table to the handlers by name: the two name the same commands.
    #[test]
    fn every_command_has_a_handler_and_every_handler_a_command() {
        let mut data: Vec<&[u8]> = table::COMMANDS.iter().map(|c| c.name.to_bytes()).collect();
        let mut handled = HANDLED.to_vec();
        data.sort_unstable();
        handled.sort_unstable();
        assert_eq!(data, handled);
    }
}
