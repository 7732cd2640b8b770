//! Background traffic: one thread sends sequential ALLOW/PEEK calls over a set of keys with explicit
//! `now` values, checks every reply against the contract model, and so knows at every moment exactly
//! which requests each key holds. Sequential calls make the only uncertainty after a crash the one
//! call in flight. Optionally every admitted call waits for a replica to acknowledge it (`WAIT 1`).
#![allow(dead_code)]

use crate::client::{five, scores, sw_line};
use crate::harness::Server;
use crate::model::Model;
use crate::rng::Rng;
use redis::{ConnectionLike, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Windows long enough (in real time) that no key's TTL runs out while a test runs, so expiry by the
/// server never races a digest comparison; trims still happen because `now` jumps ahead.
const WINDOWS: [u64; 2] = [3600, 5400];
const START_MS: u64 = 1_700_000_000_000;

/// Which keys the traffic touches.
#[derive(Debug, Clone)]
pub struct Workload {
    pub prefix: String,
    pub keys: usize,
    pub seed: u64,
}

impl Workload {
    pub fn new(prefix: &str, keys: usize, seed: u64) -> Workload {
        Workload {
            prefix: prefix.to_string(),
            keys,
            seed,
        }
    }

    pub fn key(&self, i: usize) -> String {
        format!("{}{i}", self.prefix)
    }

    /// A small `max` on some keys so they fill up and calls get rejected.
    pub fn max(&self, i: usize) -> u64 {
        3 + (i as u64 % 6) * 4
    }
}

/// What the traffic knows about every key: its model and its logical clock.
#[derive(Debug, Clone)]
pub struct State {
    pub models: Vec<Model>,
    pub clocks: Vec<u64>,
}

impl State {
    pub fn new(keys: usize) -> State {
        State {
            models: vec![Model::default(); keys],
            clocks: (0..keys as u64).map(|i| START_MS + i * 7).collect(),
        }
    }
}

/// How the traffic ended.
#[derive(Debug)]
pub struct Outcome {
    pub state: State,
    /// The call whose reply never came (the connection died): its key and the model of that key
    /// had the call run. The server may hold either version.
    pub in_flight: Option<(usize, Model)>,
    /// The I/O error that ended the traffic, if it did not end by `stop`.
    pub died: Option<String>,
    pub calls: u64,
    pub admitted: u64,
    /// Admitted calls whose `WAIT 1` met a master that a failover had demoted meanwhile (or that
    /// no replica acknowledged in time).
    pub unacked: u64,
}

pub struct Traffic {
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
    handle: Option<JoinHandle<Outcome>>,
}

impl Traffic {
    pub fn start(server: &Server, w: &Workload) -> Traffic {
        Traffic::resume(server, w, State::new(w.keys))
    }

    /// Continues from a previous run's state (e.g. after a restart).
    pub fn resume(server: &Server, w: &Workload, state: State) -> Traffic {
        Traffic::spawn(server.client(), w, state, false)
    }

    /// Traffic over any connection (e.g. a cluster client); with `wait_acks`, each admitted call
    /// is followed by `WAIT 1`, so a replica holds it before the next call.
    pub fn spawn<C>(con: C, w: &Workload, state: State, wait_acks: bool) -> Traffic
    where
        C: ConnectionLike + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicU64::new(0));
        let (s, c, w) = (stop.clone(), calls.clone(), w.clone());
        let handle = thread::spawn(move || run(con, &w, state, wait_acks, &s, &c));
        Traffic {
            stop,
            calls,
            handle: Some(handle),
        }
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Waits until `n` more calls have been answered; fails if the traffic ends first.
    pub fn wait_more(&mut self, n: u64) {
        let target = self.calls() + n;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.calls() < target {
            let finished = self.handle.as_ref().is_none_or(|h| h.is_finished());
            if finished {
                let out = self.join();
                panic!(
                    "traffic ended early after {} calls: {:?}",
                    out.calls, out.died
                );
            }
            assert!(Instant::now() < deadline, "traffic made no progress");
            thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn stop(mut self) -> Outcome {
        self.stop.store(true, Ordering::SeqCst);
        self.join()
    }

    /// Waits for the thread to end by itself (its server went away).
    pub fn join(&mut self) -> Outcome {
        let handle = self.handle.take().expect("traffic already joined");
        match handle.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn run(
    mut con: impl ConnectionLike,
    w: &Workload,
    mut state: State,
    wait_acks: bool,
    stop: &AtomicBool,
    calls: &AtomicU64,
) -> Outcome {
    let mut rng = Rng::new(w.seed);
    let mut admitted = 0;
    let mut unacked = 0;
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let i = (rng.next() % w.keys as u64) as usize;
        let clock = &mut state.clocks[i];
        *clock = match rng.next() % 100 {
            0..65 => *clock + rng.range(0, 2000),
            65..85 => *clock + rng.range(600_000, 2_400_000),
            85..90 => *clock + rng.range(6_000_000, 9_000_000),
            _ => clock.saturating_sub(rng.range(0, 5000)),
        };
        let now = *clock;
        let window = rng.pick(&WINDOWS);
        let max = w.max(i);
        let cost = if rng.chance(80) { 1 } else { rng.range(2, 4) };
        let peek = rng.chance(10);
        let line = sw_line(
            if peek { "PEEK" } else { "ALLOW" },
            &w.key(i),
            window,
            max,
            now,
            cost,
        );
        let mut after = state.models[i].clone();
        let want = if peek {
            after.peek(window, max, now, cost)
        } else {
            after.allow(window, max, now, cost)
        };
        let mut cmd = redis::cmd(&line[0]);
        for a in &line[1..] {
            cmd.arg(a);
        }
        let got: Value = match con.req_command(&cmd) {
            Ok(v) => v,
            Err(e) => {
                return Outcome {
                    state,
                    in_flight: Some((i, after)),
                    died: Some(e.to_string()),
                    calls: n,
                    admitted,
                    unacked,
                };
            }
        };
        assert_eq!(
            five(&got),
            Some(want),
            "call #{n} `{}` on a key holding {:?}",
            line.join(" "),
            state.models[i].scores
        );
        if want[0] == 1 && !peek {
            admitted += 1;
            if wait_acks && !replica_acked(&mut con, &line) {
                unacked += 1;
            }
        }
        state.models[i] = after;
        n += 1;
        calls.store(n, Ordering::SeqCst);
    }
    Outcome {
        state,
        in_flight: None,
        died: None,
        calls: n,
        admitted,
        unacked,
    }
}

/// `WAIT 1` after an admitted call: true once a replica acknowledged it. Through a cluster client
/// WAIT goes to every master; one that a failover demoted meanwhile answers an error (Redis), or,
/// on Valkey 9, keeps the WAIT blocked until its timeout and then answers 0: either is false, and
/// the manual failover itself handed everything that master had to its replica. Traffic without a
/// failover checks that no call went unacknowledged (`Outcome::unacked`).
fn replica_acked(con: &mut impl ConnectionLike, line: &[String]) -> bool {
    match redis::cmd("WAIT").arg(1).arg(10_000).query::<i64>(con) {
        Ok(n) => {
            if n < 1 {
                eprintln!("no replica acknowledged `{}` in 10 s", line.join(" "));
            }
            n >= 1
        }
        Err(e) if e.code() == Some("UNBLOCKED") || e.to_string().contains("replica") => false,
        Err(e) => panic!("WAIT after `{}`: {e}", line.join(" ")),
    }
}

/// Asserts that every key on `server` holds exactly the requests the model says were admitted;
/// the key of a call in flight at a crash may hold the state before or after that call. Returns
/// the state as found, to resume traffic from.
pub fn assert_keys_match(server: &Server, w: &Workload, out: &Outcome) -> State {
    assert_keys_match_on(&mut server.client(), w, out)
}

/// [`assert_keys_match`] through any connection (e.g. a cluster client, which reads each key
/// from the master of its slot).
pub fn assert_keys_match_on(con: &mut impl ConnectionLike, w: &Workload, out: &Outcome) -> State {
    let mut state = out.state.clone();
    for (i, model) in state.models.iter_mut().enumerate() {
        let key = w.key(i);
        let got = scores(con, &key);
        match &out.in_flight {
            Some((j, after)) if *j == i => {
                assert!(
                    got == model.scores || got == after.scores,
                    "{key} (call in flight at the crash): holds {got:?}, expected {:?} or {:?}",
                    model.scores,
                    after.scores
                );
                if got == after.scores {
                    *model = after.clone();
                }
            }
            _ => assert_eq!(
                got, model.scores,
                "{key}: scores differ from the admitted requests"
            ),
        }
    }
    state
}
