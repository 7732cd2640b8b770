//! From a command's arguments to a checked `Request`, with `now` resolved.

use super::config;
use crate::core::args::{self, Args, Now};
use crate::core::error::{Error, MAX_EXACT};
use crate::core::window::Request;
use crate::ffi::{Argv, Ctx};

/// Runs `parse` over the call's words, without allocating for any well-formed ALLOW or REFUND.
pub fn words<T>(argv: Argv<'_>, parse: fn(&[&[u8]]) -> T) -> T {
    // The common short call fills a small array; one with LIMIT options a larger one.
    match argv.len() {
        0..=8 => inline::<8, T>(argv, parse),
        9..=args::MOST_WORDS => inline::<{ args::MOST_WORDS }, T>(argv, parse),
        _ => {
            let words: Vec<&[u8]> = (0..argv.len()).map(|i| argv.bytes(i)).collect();
            parse(&words)
        }
    }
}

fn inline<const N: usize, T>(argv: Argv<'_>, parse: fn(&[&[u8]]) -> T) -> T {
    let mut words: [&[u8]; N] = [&[]; N];
    for (i, slot) in words.iter_mut().enumerate().take(argv.len()) {
        *slot = argv.bytes(i);
    }
    parse(words.get(..argv.len()).unwrap_or(&[]))
}

/// A time as the client sent it, `*` read from the server's clock.
pub fn resolve(ctx: Ctx<'_>, at: Now) -> u64 {
    match at {
        Now::At(ms) => ms,
        Now::Server => ctx.now_ms().min(MAX_EXACT),
    }
}

/// The call's request: arguments checked, `*` read from the server's clock.
pub fn request(ctx: Ctx<'_>, argv: Argv<'_>) -> Result<Request, Error> {
    let args: Args = words(argv, args::parse)?;
    Ok(Request {
        limits: args.limits,
        now: resolve(ctx, args.now),
        cost: args.cost,
        max_add: config::max_members_per_call(),
    })
}
