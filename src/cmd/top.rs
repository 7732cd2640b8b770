//! `SLIDINGWINDOW.TOP [COUNT k]` and `SLIDINGWINDOW.TOPRESET`: the keys ALLOW and ALLOWALL refused
//! most since the last reset, from a summary of at most `slidingwindow.top-keys` entries kept in
//! memory (never replicated or persisted).

use super::Answer;
use crate::core::error::Error;
use crate::core::top::{Summary, parse_count};
use crate::ffi::{Argv, Ctx};
use crate::store::Changes;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// `slidingwindow.top-keys`: the summary's entries; 0 turns it off.
static TOP_KEYS: AtomicU64 = AtomicU64::new(DEFAULT_TOP_KEYS);
pub const DEFAULT_TOP_KEYS: u64 = 1024;
pub const MAX_TOP_KEYS: u64 = 1_000_000;

/// Made at the first refusal after a load or a change of `top-keys`.
static SUMMARY: Mutex<Option<Summary>> = Mutex::new(None);

pub fn top_keys() -> u64 {
    TOP_KEYS.load(Ordering::Relaxed)
}

/// Sets `top-keys` and empties the summary.
pub fn set_top_keys(n: u64) {
    let mut guard = SUMMARY.lock().unwrap_or_else(|e| e.into_inner());
    TOP_KEYS.store(n.min(MAX_TOP_KEYS), Ordering::Relaxed);
    *guard = None;
}

/// Counts one refused call for `key`.
#[inline]
pub fn refused(key: &[u8]) {
    let top_keys = TOP_KEYS.load(Ordering::Relaxed);
    if top_keys != 0 {
        let mut guard = SUMMARY.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .get_or_insert_with(|| Summary::new(top_keys as usize))
            .count(key);
    }
}

/// `R`, the refusals counted since the reset, and the summary's bytes, for INFO.
pub fn gauges() -> (u64, u64) {
    let guard = SUMMARY.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .as_ref()
        .map_or((0, 0), |s| (s.total(), s.bytes() as u64))
}

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, _fx: &mut Changes<'a>) -> Result<Answer, Error> {
    let words: Vec<&[u8]> = (0..argv.len()).map(|i| argv.bytes(i)).collect();
    let k = parse_count(&words, top_keys())?;
    let guard = SUMMARY.lock().unwrap_or_else(|e| e.into_inner());
    let Some(summary) = guard.as_ref() else {
        return Ok(Answer::Top(Vec::new()));
    };
    let reader = ctx.reader();
    Ok(Answer::Top(summary.top(k, |name| reader.may_read(name))))
}

pub fn reset<'a>(_ctx: Ctx<'a>, argv: Argv<'a>, _fx: &mut Changes<'a>) -> Result<Answer, Error> {
    if argv.len() != 1 {
        return Err(Error::WrongArity("slidingwindow.topreset".into()));
    }
    set_top_keys(top_keys());
    Ok(Answer::Ok)
}
