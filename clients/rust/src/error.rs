//! One error for everything a call can end with short of a reply: a request refused before
//! sending, an error reply (kept as its text), a reply of the wrong shape, or the link.

use std::fmt;

#[derive(Debug, Clone)]
pub enum Error {
    /// Refused before anything was sent: what the contract would refuse (a window that is no
    /// whole number of seconds, a value out of range, a repeated key), named in words.
    Invalid(String),
    /// Redis answered with an error: its line as sent (`ERR ...`, `WRONGTYPE ...`, `CROSSSLOT ...`).
    Server(String),
    /// A reply the contract does not allow for the call sent (a server without the module
    /// answers errors, not this).
    Reply(String),
    /// The link: connecting, I/O, a timeout, the cluster's routing.
    Redis(redis::RedisError),
    /// The server cannot run the contract as configured: neither the module's commands nor the
    /// script can be run (an unknown command, a `NOSCRIPT` that `SCRIPT LOAD` does not fix, a
    /// command refused to this user). Not Redis being away: nothing was decided, and retrying
    /// will not help until the server or the client's backend is changed.
    Config(String),
}

impl Error {
    /// The call may have run on the server without its reply reaching us (the link failed or
    /// timed out, or the reply was unreadable): an admission may have been logged. Any I/O
    /// error counts (a resend refused may follow a first attempt that ran).
    pub fn may_have_run(&self) -> bool {
        match self {
            Error::Invalid(_) | Error::Server(_) | Error::Config(_) => false,
            Error::Reply(_) => true,
            Error::Redis(e) => e.is_io_error(),
        }
    }

    /// The connection was refused or found closed: the call did not reach a live server.
    pub(crate) fn link_was_down(&self) -> bool {
        match self {
            Error::Redis(e) => {
                e.is_connection_refusal() || (e.is_connection_dropped() && !e.is_timeout())
            }
            _ => false,
        }
    }
}

impl From<redis::RedisError> for Error {
    /// An error reply becomes its text; anything else stays the link's error.
    fn from(e: redis::RedisError) -> Error {
        let server = matches!(
            e.kind(),
            redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
        );
        match e.code() {
            Some(code) if server => Error::Server(line(code, e.detail())),
            _ => Error::Redis(e),
        }
    }
}

/// An error reply's line: its code, then its text.
pub(crate) fn line(code: &str, detail: Option<&str>) -> String {
    match detail {
        Some(d) => format!("{code} {d}"),
        None => code.to_string(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(why) => write!(f, "invalid request: {why}"),
            Error::Server(text) => f.write_str(text),
            Error::Reply(what) => write!(f, "unexpected reply: {what}"),
            Error::Redis(e) => write!(f, "{e}"),
            Error::Config(why) => write!(f, "configuration error: {why}"),
        }
    }
}

impl std::error::Error for Error {}
