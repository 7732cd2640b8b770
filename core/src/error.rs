//! One error enum for every way a call can be refused; each variant renders its exact reply text once.

use std::fmt;

/// Largest value any numeric argument may take: integers up to 2^53 are exact as sorted-set scores.
pub const MAX_EXACT: u64 = 1 << 53;

/// Members a sorted set holds at most, as Redis documents it: 2^32 - 1.
pub const MAX_ZSET_MEMBERS: u64 = u32::MAX as u64;
/// Largest `window` in seconds such that `window * 1000 <= 2^53`.
pub const MAX_WINDOW_SECONDS: u64 = MAX_EXACT / 1000;
/// Default of the most members one admitted call may add: 100,000 inserts take ~0.15 s; a
/// million took 6 s.
pub const MAX_ADD_PER_CALL: u64 = 100_000;
/// Most limits one call may name, the positional one included; for ALLOWALL, most on one key.
pub const MAX_LIMITS: usize = 16;
/// Most keys one ALLOWALL / PEEKALL call may name.
pub const MAX_KEYS: usize = 16;

/// The numeric arguments, named as the user knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    Window,
    Max,
    Now,
    Cost,
    /// The window of a `LIMIT window max` option.
    LimitWindow,
    /// The max of a `LIMIT window max` option.
    LimitMax,
    /// ALLOWALL's `numkeys`.
    NumKeys,
    /// The keyno of ALLOWALL's `LIMIT keyno window max`; holds `numkeys`, its upper bound.
    LimitKeyno(usize),
    /// REFUND's `n`.
    RefundN,
    /// REFUND's `AT ts`.
    At,
    /// The `LEASE ms` option: `1 <= ms` and `now + ms <= 2^53`.
    Lease,
    /// The `PRECISION p` option: `1 <= p <= 2^53`, and the members' score (`now + ms` rounded
    /// up to a multiple of `p`) at most 2^53.
    Precision,
    /// TOP's `COUNT k`; holds `slidingwindow.top-keys` (at least 1), its upper bound.
    TopCount(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Fewer arguments than the command needs; holds the command name in lower case.
    WrongArity(String),
    /// An argument that is not an integer in its valid range.
    Invalid(Arg),
    UnknownOption(String),
    RepeatedOption(String),
    MissingValue(String),
    /// An option that takes two values (`LIMIT`) with fewer after it.
    MissingValues(String),
    /// A 17th limit.
    TooManyLimits,
    /// ALLOWALL's `LIMIT` with fewer than three values after it.
    MissingKeyedValues(String),
    /// ALLOWALL's 17th limit on one key (1-based).
    TooManyKeyLimits(usize),
    /// ALLOWALL's key `.1` (1-based) is key `.0` again.
    RepeatedKey(usize, usize),
    /// ALLOWALL's key (1-based) with no `LIMIT`.
    KeyWithoutLimit(usize),
    /// An admitted call that would add more members than one call may (`cap`): `cost` on each
    /// of `keys` keys (1 for ALLOW).
    TooManyMembers {
        cost: u64,
        keys: usize,
        cap: u64,
    },
    WrongType,
    /// `SLIDINGWINDOW.CONVERT` of a missing key.
    NoSuchKey,
    /// `SLIDINGWINDOW.CONVERT` to a storage that does not exist; holds the word.
    BadStorage(String),
    /// A sorted set to convert holds a score that is no ms timestamp in `0..=2^53`.
    NotATimestamp(String),
    /// `SLIDINGWINDOW.CONVERT` to `zset` of a compact log of more requests than a sorted set
    /// holds members (`MAX_ZSET_MEMBERS`); holds the log's length.
    TooLargeForZset(u64),
    /// Malformed arguments of the internal `SLIDINGWINDOW.APPLY`.
    BadApply(&'static str),
    /// The server refused a low-level operation; should never happen.
    Server(&'static str),
    /// A bug panicked inside a command; the panic was contained.
    Panic,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WrongArity(cmd) => {
                write!(f, "ERR wrong number of arguments for '{cmd}' command")
            }
            Error::Invalid(Arg::Window) => write!(
                f,
                "ERR window must be an integer between 1 and {MAX_WINDOW_SECONDS} (window * 1000 <= 2^53)"
            ),
            Error::Invalid(Arg::Max) => {
                write!(f, "ERR max must be an integer between 1 and {MAX_EXACT}")
            }
            Error::Invalid(Arg::Now) => {
                write!(
                    f,
                    "ERR now must be an integer between 0 and {MAX_EXACT}, or *"
                )
            }
            Error::Invalid(Arg::Cost) => {
                write!(f, "ERR cost must be an integer between 1 and {MAX_EXACT}")
            }
            Error::Invalid(Arg::LimitWindow) => write!(
                f,
                "ERR LIMIT window must be an integer between 1 and {MAX_WINDOW_SECONDS} (window * 1000 <= 2^53)"
            ),
            Error::Invalid(Arg::LimitMax) => write!(
                f,
                "ERR LIMIT max must be an integer between 1 and {MAX_EXACT}"
            ),
            Error::Invalid(Arg::NumKeys) => write!(
                f,
                "ERR numkeys must be an integer between 1 and {MAX_KEYS}, followed by that many keys and now"
            ),
            Error::Invalid(Arg::LimitKeyno(numkeys)) => write!(
                f,
                "ERR LIMIT keyno must be an integer between 1 and numkeys ({numkeys})"
            ),
            Error::Invalid(Arg::RefundN) => {
                write!(f, "ERR n must be an integer between 1 and {MAX_EXACT}")
            }
            Error::Invalid(Arg::At) => write!(
                f,
                "ERR AT must be an integer between 0 and {MAX_EXACT}, or *"
            ),
            Error::Invalid(Arg::Lease) => write!(
                f,
                "ERR LEASE must be an integer between 1 and {MAX_EXACT} - now (now + LEASE <= 2^53)"
            ),
            Error::Invalid(Arg::Precision) => write!(
                f,
                "ERR PRECISION must be an integer between 1 and {MAX_EXACT} (now + LEASE rounded up to a multiple of PRECISION <= 2^53)"
            ),
            Error::Invalid(Arg::TopCount(most)) => write!(
                f,
                "ERR COUNT must be an integer between 1 and {most} (slidingwindow.top-keys)"
            ),
            Error::UnknownOption(tok) => write!(f, "ERR syntax error, unknown option '{tok}'"),
            Error::RepeatedOption(tok) => {
                write!(f, "ERR syntax error, option '{tok}' given twice")
            }
            Error::MissingValue(tok) => {
                write!(f, "ERR syntax error, option '{tok}' needs a value")
            }
            Error::MissingValues(tok) => {
                write!(f, "ERR syntax error, option '{tok}' needs two values")
            }
            Error::TooManyLimits => write!(
                f,
                "ERR syntax error, at most {MAX_LIMITS} limits in one call"
            ),
            Error::MissingKeyedValues(tok) => write!(
                f,
                "ERR syntax error, option '{tok}' needs three values (keyno window max)"
            ),
            Error::TooManyKeyLimits(keyno) => write!(
                f,
                "ERR syntax error, at most {MAX_LIMITS} limits on one key (key {keyno})"
            ),
            Error::RepeatedKey(first, again) => write!(
                f,
                "ERR key {again} is key {first} again: the keys of one call must be distinct"
            ),
            Error::KeyWithoutLimit(keyno) => write!(
                f,
                "ERR key {keyno} has no LIMIT: every key needs at least one"
            ),
            Error::TooManyMembers { cost, keys, cap } => {
                // ALLOWALL says what it counted: the cost on each of its keys.
                write!(f, "ERR cost {cost}")?;
                if *keys > 1 {
                    write!(f, " times {keys} keys")?;
                }
                write!(f, " would add more than {cap} members in one call")
            }
            Error::WrongType => {
                write!(
                    f,
                    "WRONGTYPE Operation against a key holding the wrong kind of value"
                )
            }
            Error::NoSuchKey => write!(f, "ERR no such key"),
            Error::BadStorage(tok) => {
                write!(f, "ERR storage must be zset or compact, not '{tok}'")
            }
            Error::NotATimestamp(score) => write!(
                f,
                "ERR the sorted set holds a score that is not a timestamp in ms (an integer between 0 and {MAX_EXACT}): {score}"
            ),
            Error::TooLargeForZset(len) => write!(
                f,
                "ERR the compact log holds {len} requests, more than a sorted set holds ({MAX_ZSET_MEMBERS} members, one a request)"
            ),
            Error::BadApply(what) => write!(f, "ERR SLIDINGWINDOW.APPLY: {what}"),
            Error::Server(what) => write!(f, "ERR slidingwindow: the server refused {what}"),
            Error::Panic => write!(
                f,
                "ERR slidingwindow: internal error (a bug was caught; the server is unharmed), please report it"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Renders user bytes for an error line: printable ASCII kept, the rest escaped, long tokens cut.
pub fn token(bytes: &[u8]) -> String {
    const LIMIT: usize = 64;
    let mut out = String::new();
    for &b in bytes.iter().take(LIMIT) {
        if b.is_ascii_graphic() || b == b' ' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > LIMIT {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_exact() {
        let cases: &[(Error, &str)] = &[
            (
                Error::WrongArity("slidingwindow.allow".into()),
                "ERR wrong number of arguments for 'slidingwindow.allow' command",
            ),
            (
                Error::Invalid(Arg::Window),
                "ERR window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)",
            ),
            (
                Error::Invalid(Arg::Max),
                "ERR max must be an integer between 1 and 9007199254740992",
            ),
            (
                Error::Invalid(Arg::Now),
                "ERR now must be an integer between 0 and 9007199254740992, or *",
            ),
            (
                Error::Invalid(Arg::Cost),
                "ERR cost must be an integer between 1 and 9007199254740992",
            ),
            (
                Error::UnknownOption("FOO".into()),
                "ERR syntax error, unknown option 'FOO'",
            ),
            (
                Error::RepeatedOption("COST".into()),
                "ERR syntax error, option 'COST' given twice",
            ),
            (
                Error::MissingValue("cost".into()),
                "ERR syntax error, option 'cost' needs a value",
            ),
            (
                Error::Invalid(Arg::LimitWindow),
                "ERR LIMIT window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)",
            ),
            (
                Error::Invalid(Arg::LimitMax),
                "ERR LIMIT max must be an integer between 1 and 9007199254740992",
            ),
            (
                Error::MissingValues("limit".into()),
                "ERR syntax error, option 'limit' needs two values",
            ),
            (
                Error::TooManyLimits,
                "ERR syntax error, at most 16 limits in one call",
            ),
            (
                Error::TooManyMembers {
                    cost: 200_000,
                    keys: 1,
                    cap: MAX_ADD_PER_CALL,
                },
                "ERR cost 200000 would add more than 100000 members in one call",
            ),
            (
                Error::TooManyMembers {
                    cost: 60_000,
                    keys: 2,
                    cap: MAX_ADD_PER_CALL,
                },
                "ERR cost 60000 times 2 keys would add more than 100000 members in one call",
            ),
            (
                Error::Invalid(Arg::Lease),
                "ERR LEASE must be an integer between 1 and 9007199254740992 - now (now + LEASE <= 2^53)",
            ),
            (
                Error::WrongType,
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ),
            (Error::NoSuchKey, "ERR no such key"),
            (
                Error::BadStorage("list".into()),
                "ERR storage must be zset or compact, not 'list'",
            ),
            (
                Error::NotATimestamp("1.5".into()),
                "ERR the sorted set holds a score that is not a timestamp in ms (an integer between 0 and 9007199254740992): 1.5",
            ),
            (
                Error::TooLargeForZset(4_300_000_000),
                "ERR the compact log holds 4300000000 requests, more than a sorted set holds (4294967295 members, one a request)",
            ),
            (Error::BadApply("cutoff"), "ERR SLIDINGWINDOW.APPLY: cutoff"),
            (
                Error::Invalid(Arg::NumKeys),
                "ERR numkeys must be an integer between 1 and 16, followed by that many keys and now",
            ),
            (
                Error::Invalid(Arg::LimitKeyno(3)),
                "ERR LIMIT keyno must be an integer between 1 and numkeys (3)",
            ),
            (
                Error::Invalid(Arg::RefundN),
                "ERR n must be an integer between 1 and 9007199254740992",
            ),
            (
                Error::Invalid(Arg::At),
                "ERR AT must be an integer between 0 and 9007199254740992, or *",
            ),
            (
                Error::MissingKeyedValues("LIMIT".into()),
                "ERR syntax error, option 'LIMIT' needs three values (keyno window max)",
            ),
            (
                Error::TooManyKeyLimits(2),
                "ERR syntax error, at most 16 limits on one key (key 2)",
            ),
            (
                Error::RepeatedKey(1, 3),
                "ERR key 3 is key 1 again: the keys of one call must be distinct",
            ),
            (
                Error::KeyWithoutLimit(2),
                "ERR key 2 has no LIMIT: every key needs at least one",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), *text);
        }
    }

    #[test]
    fn tokens_are_one_printable_line() {
        let cases: &[(&[u8], &str)] = &[
            (b"COST", "COST"),
            (b"a b", "a b"),
            (b"x\r\ny", "x\\x0d\\x0ay"),
            (b"\x00\xff", "\\x00\\xff"),
            (b"", ""),
        ];
        for (bytes, want) in cases {
            assert_eq!(token(bytes), *want);
        }
        let long = [b'a'; 100];
        assert_eq!(token(&long), format!("{}...", "a".repeat(64)));
    }
}
