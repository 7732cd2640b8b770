//! The commands' arguments, as `COMMAND DOCS` reports them and redis-cli / valkey-cli hint them.

use crate::ffi::Arg;

/// `now`: a Unix time in ms, or `*` for the server's clock.
const NOW: [Arg; 2] = [Arg::integer(c"now"), Arg::pure_token(c"server-clock", c"*")];

/// One more limit: `LIMIT window max`.
const LIMIT: [Arg; 2] = [Arg::integer(c"window"), Arg::integer(c"max")];

/// `key window max now|* [COST cost] [LIMIT window max [LIMIT window max ...]] [LEASE ms]
/// [PRECISION p] [DETAIL]`, for ALLOW and PEEK alike.
pub const WINDOW_ARGS: [Arg; 9] = [
    Arg::key(c"key"),
    Arg::integer(c"window"),
    Arg::integer(c"max"),
    Arg::one_of(c"now", &NOW),
    Arg::integer(c"cost").token(c"COST").optional(),
    Arg::block(c"limit", &LIMIT)
        .token(c"LIMIT")
        .optional()
        .multiple(),
    LEASE,
    PRECISION,
    DETAIL,
];

/// `LEASE ms`: admitted members are scored `now + ms`.
const LEASE: Arg = Arg::integer(c"ms").token(c"LEASE").optional();

/// `PRECISION p`: admitted members' score is rounded up to a multiple of `p` ms.
const PRECISION: Arg = Arg::integer(c"p").token(c"PRECISION").optional();

/// `DETAIL`: every limit's state in the reply.
const DETAIL: Arg = Arg::pure_token(c"detail", c"DETAIL").optional();

/// One limit on one key: `LIMIT keyno window max`.
const KEYED_LIMIT: [Arg; 3] = [
    Arg::integer(c"keyno"),
    Arg::integer(c"window"),
    Arg::integer(c"max"),
];

/// `numkeys key [key ...] now|* [COST cost] LIMIT keyno window max [LIMIT keyno window max ...]
/// [LEASE ms] [PRECISION p] [DETAIL]`, for ALLOWALL and PEEKALL alike.
pub const ALL_ARGS: [Arg; 8] = [
    Arg::integer(c"numkeys"),
    Arg::key(c"key").multiple(),
    Arg::one_of(c"now", &NOW),
    Arg::integer(c"cost").token(c"COST").optional(),
    Arg::block(c"limit", &KEYED_LIMIT)
        .token(c"LIMIT")
        .multiple(),
    LEASE,
    PRECISION,
    DETAIL,
];

/// `ts`: a Unix time in ms, or `*` for the server's clock.
const TS: [Arg; 2] = [Arg::integer(c"ts"), Arg::pure_token(c"server-clock", c"*")];

/// `key n [AT ts|*]`.
pub const REFUND_ARGS: [Arg; 3] = [
    Arg::key(c"key"),
    Arg::integer(c"n"),
    Arg::one_of(c"at", &TS).token(c"AT").optional(),
];

const STORAGES: [Arg; 2] = [
    Arg::pure_token(c"zset", c"zset"),
    Arg::pure_token(c"compact", c"compact"),
];

/// `key zset|compact`.
pub const CONVERT_ARGS: [Arg; 2] = [Arg::key(c"key"), Arg::one_of(c"storage", &STORAGES)];

/// `key change`: one argument, `cutoff pexpireat [ts n]...`.
pub const APPLY_ARGS: [Arg; 2] = [Arg::key(c"key"), Arg::string(c"change")];

/// `[COUNT k]`.
pub const TOP_ARGS: [Arg; 1] = [Arg::integer(c"k").token(c"COUNT").optional()];
