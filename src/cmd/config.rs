//! The module's configs and their current values, read by every call.

use super::top;
use crate::core::error::MAX_ADD_PER_CALL;
use crate::ffi::{Loader, NumericConfig};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store;

// Commands and config callbacks run on the main thread; atomics keep that free of `unsafe`.
static MAX_MEMBERS_PER_CALL: AtomicU64 = AtomicU64::new(MAX_ADD_PER_CALL);
static LATENESS: AtomicU64 = AtomicU64::new(0);

/// `slidingwindow.max-members-per-call`: most members one admitted call may add.
pub fn max_members_per_call() -> u64 {
    MAX_MEMBERS_PER_CALL.load(Ordering::Relaxed)
}

/// `slidingwindow.lateness`: how many ms more than its longest window a key keeps, so that a
/// caller whose `now` is that far behind another's still finds every member of its window.
pub fn lateness() -> u64 {
    LATENESS.load(Ordering::Relaxed)
}

/// The highest cap: 10 million inserts block the server for seconds already.
const MAX_MEMBERS_LIMIT: i64 = 10_000_000;

static MAX_MEMBERS_CONFIG: NumericConfig = NumericConfig {
    name: c"max-members-per-call",
    default: MAX_ADD_PER_CALL as i64,
    min: 1,
    max: MAX_MEMBERS_LIMIT,
    get: || i64::try_from(MAX_MEMBERS_PER_CALL.load(Ordering::Relaxed)).unwrap_or(i64::MAX),
    set: |v| MAX_MEMBERS_PER_CALL.store(u64::try_from(v).unwrap_or(1), Ordering::Relaxed),
};

/// The longest lateness: a day.
const MAX_LATENESS: i64 = 86_400_000;

static LATENESS_CONFIG: NumericConfig = NumericConfig {
    name: c"lateness",
    default: 0,
    min: 0,
    max: MAX_LATENESS,
    get: || i64::try_from(LATENESS.load(Ordering::Relaxed)).unwrap_or(i64::MAX),
    set: |v| LATENESS.store(u64::try_from(v).unwrap_or(0), Ordering::Relaxed),
};

static TOP_KEYS_CONFIG: NumericConfig = NumericConfig {
    name: c"top-keys",
    default: top::DEFAULT_TOP_KEYS as i64,
    min: 0,
    max: top::MAX_TOP_KEYS as i64,
    get: || i64::try_from(top::top_keys()).unwrap_or(i64::MAX),
    set: |v| top::set_top_keys(u64::try_from(v).unwrap_or(0)),
};

/// The configs' names without the prefix, as the load line gives them.
const NAMES: [&str; 4] = ["storage", "max-members-per-call", "lateness", "top-keys"];

/// Registers the configs, applies the values redis.conf or `MODULE LOADEX` gave, then the load
/// line's `name value` pairs (they come last, so they win: Redis applies a default to every
/// config it was given no value for when it loads the others).
pub fn register(loader: &Loader, args: &[&[u8]]) -> Result<(), String> {
    loader.enum_config(&store::STORAGE_CONFIG)?;
    loader.numeric_config(&MAX_MEMBERS_CONFIG)?;
    loader.numeric_config(&LATENESS_CONFIG)?;
    loader.numeric_config(&TOP_KEYS_CONFIG)?;
    loader.load_configs()?;
    for (name, value) in load_line(args)? {
        loader
            .set_config(name, value)
            .map_err(|why| format!("load argument '{name} {}' refused: {why}", show(value)))?;
    }
    Ok(())
}

/// The load line's arguments as `(config, value)` pairs; an unknown name or a name without a
/// value refuses them all.
fn load_line<'a>(args: &[&'a [u8]]) -> Result<Vec<(&'static str, &'a [u8])>, String> {
    args.chunks(2)
        .map(|pair| {
            let (name, value) = match *pair {
                [name, value] => (name, Some(value)),
                [name] => (name, None),
                _ => return Err("an empty load argument".to_string()),
            };
            let Some(known) = NAMES
                .iter()
                .find(|n| n.as_bytes().eq_ignore_ascii_case(name))
            else {
                return Err(format!(
                    "unknown load argument '{}' (configs: {})",
                    show(name),
                    NAMES.join(", ")
                ));
            };
            let value = value.ok_or_else(|| format!("load argument '{known}' has no value"))?;
            Ok((*known, value))
        })
        .collect()
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_line_is_name_value_pairs_of_known_configs() {
        let args: [&[u8]; 6] = [
            b"STORAGE",
            b"compact",
            b"max-members-per-call",
            b"5",
            b"Lateness",
            b"5000",
        ];
        assert_eq!(
            load_line(&args),
            Ok(vec![
                ("storage", &b"compact"[..]),
                ("max-members-per-call", &b"5"[..]),
                ("lateness", &b"5000"[..])
            ])
        );
        assert_eq!(load_line(&[]), Ok(vec![]));
        assert_eq!(
            load_line(&[b"storage"]),
            Err("load argument 'storage' has no value".into())
        );
        assert_eq!(
            load_line(&[b"slidingwindow.storage", b"zset"]),
            Err("unknown load argument 'slidingwindow.storage' (configs: storage, max-members-per-call, lateness, top-keys)".into())
        );
    }
}
