//! From a command's arguments to a checked request, with `now` resolved and its keys opened.

use super::config;
use crate::core::args::{self, Args, Now, score};
use crate::core::error::{Error, MAX_EXACT};
use crate::core::window::Request;
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::{self, Opened};

/// Runs `parse` over the call's words, without allocating for any well-formed ALLOW or REFUND.
pub fn words<T>(argv: Argv<'_>, parse: impl FnOnce(&[&[u8]]) -> T) -> T {
    // The common short call fills a small array; one with options a larger one.
    match argv.len() {
        // ALLOW and PEEK without options: five words, each read once, but for the command's
        // name, which no parser reads in a call of five words.
        args::NAMELESS => parse(&std::array::from_fn::<_, { args::NAMELESS }, _>(|i| {
            if i == 0 { &[] } else { argv.bytes(i) }
        })),
        0..=8 => inline::<8, T>(argv, parse),
        9..=16 => inline::<16, T>(argv, parse),
        17..=args::MOST_WORDS => inline::<{ args::MOST_WORDS }, T>(argv, parse),
        _ => {
            let words: Vec<&[u8]> = (0..argv.len()).map(|i| argv.bytes(i)).collect();
            parse(&words)
        }
    }
}

fn inline<const N: usize, T>(argv: Argv<'_>, parse: impl FnOnce(&[&[u8]]) -> T) -> T {
    let mut words: [&[u8]; N] = [&[]; N];
    for (i, slot) in words.iter_mut().enumerate().take(argv.len()) {
        *slot = argv.bytes(i);
    }
    parse(words.get(..argv.len()).unwrap_or(&[]))
}

/// A time as the client sent it, `*` the server's `clock`.
pub fn resolve(clock: u64, at: Now) -> u64 {
    match at {
        Now::At(ms) => ms,
        Now::Server => clock.min(MAX_EXACT),
    }
}

/// The call's request: arguments checked by `parse` (ALLOW's `args::parse`, ALLOWALL's
/// `args::parse_all`), `*` read from the server's clock once (a lease and a precision on it
/// checked against it; every key's TTL counts from that reading).
pub fn request<S>(
    ctx: Ctx<'_>,
    argv: Argv<'_>,
    parse: impl FnOnce(&[&[u8]]) -> Result<Args<S>, Error>,
) -> Result<Request<S>, Error> {
    let args = words(argv, parse)?;
    // One clock reading per call: `*` and the TTL agree.
    let clock = ctx.now_ms();
    let now = resolve(clock, args.now);
    let at = score(now, args.lease, args.precision)?;
    Ok(Request {
        limits: args.limits,
        now,
        clock,
        cost: args.cost,
        max_add: config::max_members_per_call(),
        at,
        lateness: config::lateness(),
        detail: args.detail,
    })
}

/// Opens the call's `n` keys (arguments 2 to n + 1), checking each one's type.
pub fn open_keys<'a>(
    ctx: Ctx<'a>,
    argv: Argv<'a>,
    n: usize,
    mode: Mode,
) -> Result<Vec<Opened<'a>>, Error> {
    (0..n)
        .map(|i| {
            let name = argv
                .get(i.saturating_add(2))
                .ok_or(Error::Server("a key argument"))?;
            store::open(ctx, name, mode)
        })
        .collect()
}
