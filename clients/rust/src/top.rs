//! `SLIDINGWINDOW.TOP`: the keys refused most, from every master of a cluster, added up.

use crate::client::Client;
use crate::error::Error;
use redis::Value;
use redis::cluster_routing::{ResponsePolicy, Route, SlotAddr};
use std::collections::HashMap;

/// One key of `Client::top`: `refused` is never below the key's true refusals since the servers'
/// last `SLIDINGWINDOW.TOPRESET` and never above them by more than `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopEntry {
    pub key: Vec<u8>,
    pub refused: u64,
    pub error: u64,
}

impl Client {
    /// The keys refused most since the servers' last `SLIDINGWINDOW.TOPRESET`, most first (ties:
    /// the smaller error, then the key's bytes), at most `count` (`SLIDINGWINDOW.TOP COUNT count`;
    /// at most the servers' `slidingwindow.top-keys`). In a cluster every master is asked and a
    /// key's counts and errors are added up.
    pub async fn top(&self, count: u64) -> Result<Vec<TopEntry>, Error> {
        if count == 0 {
            return Err(Error::Invalid("top's count must be at least 1".into()));
        }
        if !self.module(Route::new(0, SlotAddr::Master)).await? {
            return Err(Error::Invalid(
                "SLIDINGWINDOW.TOP needs the module: the script path (a server without it) keeps \
                 no summary of refused keys"
                    .into(),
            ));
        }
        let mut cmd = redis::cmd("SLIDINGWINDOW.TOP");
        cmd.arg("COUNT").arg(count);
        let entries = entries(self.on_masters(&cmd, ResponsePolicy::CombineArrays).await?)?;
        Ok(merged(entries, count))
    }
}

/// TOP's reply (or several masters' replies, concatenated): `[key, refused, error]` each.
fn entries(value: Value) -> Result<Vec<TopEntry>, Error> {
    let bad = |v: &Value| Error::Reply(format!("SLIDINGWINDOW.TOP answered {v:?}"));
    let Value::Array(items) = value else {
        return Err(bad(&value));
    };
    items
        .iter()
        .map(|item| match item {
            Value::Array(f) => match &f[..] {
                [
                    Value::BulkString(key),
                    Value::Int(refused),
                    Value::Int(error),
                ] => Ok(TopEntry {
                    key: key.clone(),
                    refused: u64::try_from(*refused).map_err(|_| bad(item))?,
                    error: u64::try_from(*error).map_err(|_| bad(item))?,
                }),
                _ => Err(bad(item)),
            },
            _ => Err(bad(item)),
        })
        .collect()
}

/// Entries of one key added up, in TOP's order, the first `count`.
fn merged(entries: Vec<TopEntry>, count: u64) -> Vec<TopEntry> {
    let mut totals: HashMap<Vec<u8>, (u64, u64)> = HashMap::new();
    for e in entries {
        let t = totals.entry(e.key).or_default();
        t.0 += e.refused;
        t.1 += e.error;
    }
    let mut out: Vec<TopEntry> = totals
        .into_iter()
        .map(|(key, (refused, error))| TopEntry {
            key,
            refused,
            error,
        })
        .collect();
    out.sort_by(|a, b| {
        b.refused
            .cmp(&a.refused)
            .then(a.error.cmp(&b.error))
            .then_with(|| a.key.cmp(&b.key))
    });
    out.truncate(usize::try_from(count).unwrap_or(usize::MAX));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, refused: u64, error: u64) -> TopEntry {
        TopEntry {
            key: key.as_bytes().to_vec(),
            refused,
            error,
        }
    }

    #[test]
    fn masters_entries_are_added_up_in_tops_order() {
        let all = vec![
            entry("b", 3, 1),
            entry("a", 3, 0),
            entry("c", 5, 0),
            entry("b", 1, 0),
            entry("d", 3, 0),
        ];
        assert_eq!(
            merged(all.clone(), 10),
            vec![
                entry("c", 5, 0),
                entry("b", 4, 1),
                entry("a", 3, 0),
                entry("d", 3, 0)
            ]
        );
        assert_eq!(merged(all, 2), vec![entry("c", 5, 0), entry("b", 4, 1)]);
    }

    #[test]
    fn replies_are_read_or_refused() {
        let reply = Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"k".to_vec()),
            Value::Int(2),
            Value::Int(0),
        ])]);
        assert_eq!(entries(reply).ok(), Some(vec![entry("k", 2, 0)]));
        assert!(entries(Value::Int(1)).is_err());
        let negative = Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"k".to_vec()),
            Value::Int(-1),
            Value::Int(0),
        ])]);
        assert!(entries(negative).is_err());
    }
}
