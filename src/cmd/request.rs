//! From a command's arguments to a checked `Request`, with `now` resolved.

use super::config;
use crate::core::args::{self, Args, Now};
use crate::core::error::{Error, MAX_EXACT};
use crate::core::window::Request;
use crate::ffi::{Argv, Ctx};

/// Parses without allocating for any well-formed call.
fn parse(argv: Argv<'_>) -> Result<Args, Error> {
    // The common short call fills a small array; one with LIMIT options a larger one.
    match argv.len() {
        0..=8 => parse_inline::<8>(argv),
        9..=args::MOST_WORDS => parse_inline::<{ args::MOST_WORDS }>(argv),
        _ => {
            let words: Vec<&[u8]> = (0..argv.len()).map(|i| argv.bytes(i)).collect();
            args::parse(&words)
        }
    }
}

fn parse_inline<const N: usize>(argv: Argv<'_>) -> Result<Args, Error> {
    let mut words: [&[u8]; N] = [&[]; N];
    for (i, slot) in words.iter_mut().enumerate().take(argv.len()) {
        *slot = argv.bytes(i);
    }
    args::parse(words.get(..argv.len()).unwrap_or(&[]))
}

/// The call's request: arguments checked, `*` read from the server's clock.
pub fn request(ctx: Ctx<'_>, argv: Argv<'_>) -> Result<Request, Error> {
    let args = parse(argv)?;
    // One clock reading per call: `*` and the TTL agree.
    let clock = ctx.now_ms();
    let now = match args.now {
        Now::At(ms) => ms,
        Now::Server => clock.min(MAX_EXACT),
    };
    Ok(Request {
        limits: args.limits,
        now,
        clock,
        cost: args.cost,
        max_add: config::max_members_per_call(),
    })
}
