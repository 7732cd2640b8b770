//! The commands' arguments, as `COMMAND DOCS` reports them and redis-cli / valkey-cli hint them.

use crate::ffi::Arg;

/// `now`: a Unix time in ms, or `*` for the server's clock.
const NOW: [Arg; 2] = [Arg::integer(c"now"), Arg::pure_token(c"server-clock", c"*")];

/// One more limit: `LIMIT window max`.
const LIMIT: [Arg; 2] = [Arg::integer(c"window"), Arg::integer(c"max")];

/// `key window max now|* [COST cost] [LIMIT window max [LIMIT window max ...]]`, for ALLOW and
/// PEEK alike.
pub const WINDOW_ARGS: [Arg; 6] = [
    Arg::key(c"key"),
    Arg::integer(c"window"),
    Arg::integer(c"max"),
    Arg::one_of(c"now", &NOW),
    Arg::integer(c"cost").token(c"COST").optional(),
    Arg::block(c"limit", &LIMIT)
        .token(c"LIMIT")
        .optional()
        .multiple(),
];
