//! The worst single call: a window in which every one of 200,000 members has expired.

use redis::{Cmd, Connection, Value};

use crate::Result;
use crate::info;
use crate::members::Members;

pub const WORST_MEMBERS: u64 = 200_000;
/// Each trial measures one call per variant; the report keeps every trial, and the target
/// is checked on the worst, since one call is at the mercy of the scheduler.
const TRIALS: usize = 5;
const WINDOW_S: u64 = 60;
const MAX: u64 = 10;
/// Members go in oldest first, one per ms from here.
const FIRST_SCORE: u64 = 1_700_000_000_000;
/// ZADD score/member pairs per command when filling.
const ZADD_CHUNK: u64 = 1000;

#[derive(Default)]
pub struct Worst {
    pub members: u64,
    /// In-command µs of each trial's single call.
    pub module_us: Vec<u64>,
    pub compact_us: Vec<u64>,
    pub lua_us: Vec<u64>,
}

impl Worst {
    pub fn compact_best(&self) -> u64 {
        self.compact_us.iter().copied().min().unwrap_or(0)
    }

    pub fn compact_median(&self) -> u64 {
        median(&self.compact_us)
    }

    pub fn module_max(&self) -> u64 {
        self.module_us.iter().copied().max().unwrap_or(0)
    }

    pub fn lua_max(&self) -> u64 {
        self.lua_us.iter().copied().max().unwrap_or(0)
    }

    pub fn module_median(&self) -> u64 {
        median(&self.module_us)
    }

    pub fn lua_median(&self) -> u64 {
        median(&self.lua_us)
    }
}

fn median(values: &[u64]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}

pub fn run(con: &mut Connection, sha: &str) -> Result<Worst> {
    let mut worst = Worst {
        members: WORST_MEMBERS,
        module_us: Vec::new(),
        compact_us: Vec::new(),
        lua_us: Vec::new(),
    };
    let mut members = Members::new(0xBAD);
    // Past the newest score by more than a window: everything is expired.
    let now = FIRST_SCORE + WORST_MEMBERS + WINDOW_S * 1000 + 1;
    for trial in 0..TRIALS {
        redis::cmd("FLUSHALL").exec(con)?;
        let module_key = format!("sw:worst:module:{trial}");
        let compact_key = format!("sw:worst:compact:{trial}");
        let lua_key = format!("sw:worst:lua:{trial}");
        fill(con, &module_key, &mut members)?;
        fill_compact(con, &compact_key)?;
        fill(con, &lua_key, &mut members)?;

        for (key, times) in [
            (&module_key, &mut worst.module_us),
            (&compact_key, &mut worst.compact_us),
        ] {
            let mut allow = redis::cmd("SLIDINGWINDOW.ALLOW");
            allow.arg(key).arg(WINDOW_S).arg(MAX).arg(now);
            times.push(timed_call(con, &allow, "slidingwindow.allow", key)?);
        }

        let mut script = redis::cmd("EVALSHA");
        script
            .arg(sha)
            .arg(1)
            .arg(&lua_key)
            .arg(WINDOW_S)
            .arg(MAX)
            .arg(now);
        script.arg(members.next(now));
        worst
            .lua_us
            .push(timed_call(con, &script, "evalsha", &lua_key)?);
    }
    Ok(worst)
}

/// A sorted set of WORST_MEMBERS ULID-like members scored one per ms from FIRST_SCORE.
fn fill(con: &mut Connection, key: &str, members: &mut Members) -> Result<()> {
    let mut pipe = redis::pipe();
    for chunk_start in (0..WORST_MEMBERS).step_by(ZADD_CHUNK as usize) {
        let zadd = pipe.cmd("ZADD").arg(key);
        for i in chunk_start..(chunk_start + ZADD_CHUNK).min(WORST_MEMBERS) {
            let score = FIRST_SCORE + i;
            zadd.arg(score).arg(members.next(score));
        }
    }
    let _: Vec<Value> = pipe.query(con)?;
    let card: u64 = redis::cmd("ZCARD").arg(key).query(con)?;
    if card != WORST_MEMBERS {
        return Err(format!("{key}: built {card} members, wanted {WORST_MEMBERS}").into());
    }
    Ok(())
}

/// A compact log of WORST_MEMBERS timestamps, one per ms from FIRST_SCORE, written as the
/// replication stream would (`SLIDINGWINDOW.APPLY key "cutoff pexpireat [ts n]..."`).
fn fill_compact(con: &mut Connection, key: &str) -> Result<()> {
    let mut pipe = redis::pipe();
    for chunk_start in (0..WORST_MEMBERS).step_by(ZADD_CHUNK as usize) {
        let mut change = String::from("-1 0");
        for i in chunk_start..(chunk_start + ZADD_CHUNK).min(WORST_MEMBERS) {
            change += &format!(" {} 1", FIRST_SCORE + i);
        }
        pipe.cmd("SLIDINGWINDOW.APPLY").arg(key).arg(change);
    }
    let _: Vec<Value> = pipe.query(con)?;
    let count = logged(con, key)?;
    if count != WORST_MEMBERS {
        return Err(format!("{key}: built {count} timestamps, wanted {WORST_MEMBERS}").into());
    }
    Ok(())
}

/// Members a key logs, whatever its storage (the script's sorted sets included): a PEEK at
/// time 0 trims nothing and, its cost above max, adds nothing, so its count is every member.
pub fn logged(con: &mut Connection, key: &str) -> Result<u64> {
    let reply: Vec<u64> = redis::cmd("SLIDINGWINDOW.PEEK")
        .arg(key)
        .arg(WINDOW_S)
        .arg(1)
        .arg(0)
        .arg("COST")
        .arg(2)
        .query(con)?;
    reply
        .get(1)
        .copied()
        .ok_or_else(|| format!("{key}: PEEK answered {reply:?}").into())
}

/// Runs `call` alone between a stats reset and a read of `stat`: its in-command µs.
/// The call must leave exactly the one new member behind (everything else expired).
fn timed_call(con: &mut Connection, call: &Cmd, stat: &str, key: &str) -> Result<u64> {
    info::reset_stats(con)?;
    let _: Value = call.query(con)?;
    let stats = info::command_stats(con, &[stat])?;
    let card = logged(con, key)?;
    if stats[0].calls != 1 || card != 1 {
        return Err(format!(
            "{stat} on a fully expired key: {} calls recorded, {card} members left (wanted 1, 1)",
            stats[0].calls
        )
        .into());
    }
    Ok(stats[0].usec)
}
