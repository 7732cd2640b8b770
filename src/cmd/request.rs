//! From a command's arguments to a checked `Request`, with `now` resolved.

use super::config;
use crate::core::args::{self, Args, Now};
use crate::core::error::{Error, MAX_EXACT};
use crate::core::window::Request;
use crate::ffi::{Argv, Ctx};

/// Parses without allocating for any well-formed call.
fn parse(argv: Argv<'_>) -> Result<Args, Error> {
    const INLINE: usize = 8;
    if argv.len() > INLINE {
        let words: Vec<&[u8]> = (0..argv.len()).map(|i| argv.bytes(i)).collect();
        return args::parse(&words);
    }
    let mut words: [&[u8]; INLINE] = [&[]; INLINE];
    for (i, slot) in words.iter_mut().enumerate().take(argv.len()) {
        *slot = argv.bytes(i);
    }
    args::parse(words.get(..argv.len()).unwrap_or(&[]))
}

/// The call's request: arguments checked, `*` read from the server's clock.
pub fn request(ctx: Ctx<'_>, argv: Argv<'_>) -> Result<Request, Error> {
    let args = parse(argv)?;
    let now = match args.now {
        Now::At(ms) => ms,
        Now::Server => ctx.now_ms().min(MAX_EXACT),
    };
    Ok(Request {
        window_ms: args.window_ms,
        max: args.max,
        now,
        cost: args.cost,
        max_add: config::max_members_per_call(),
    })
}
