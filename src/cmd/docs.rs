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

const STORAGES: [Arg; 2] = [
    Arg::pure_token(c"zset", c"zset"),
    Arg::pure_token(c"compact", c"compact"),
];

/// `key zset|compact`.
pub const CONVERT_ARGS: [Arg; 2] = [Arg::key(c"key"), Arg::one_of(c"storage", &STORAGES)];

/// `key change`: one argument, `cutoff pexpireat [ts n]...`.
pub const APPLY_ARGS: [Arg; 2] = [Arg::key(c"key"), Arg::string(c"change")];
