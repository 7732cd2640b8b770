//! The lease spec (`spec/leases.json`): scenarios of one lease object on a clock the replayer
//! sets, and what each step must answer and send, for the Python, Node.js, Go and Rust lease
//! objects to replay. The answers come from the helpers' lease policy as docs/clients.md ("Leases,
//! for hot keys") states it, played here over the contract's model (`model.rs`), never from a
//! client or the module.
//!
//! The lease's clock answers `t0 + at` during a step; every call it sends passes that as its
//! `now`, so the replies depend on nothing else. Durations are 60 s, so no lease's own timer fires
//! while a scenario runs. Regenerate with `cargo run -p testkit --bin spec -- leases >
//! spec/leases.json` (a test holds the file equal to it).

use crate::model::{Answer, Model, Options};
use std::fmt::Write;

const T0: u64 = 1_700_000_000_000;
const KEY: &str = "{t}:k";

/// What one step does.
#[derive(Clone, Copy)]
pub enum Op {
    /// One `allow()` of the lease.
    Allow,
    /// `close()` of the lease.
    Close,
    /// Another client's `ALLOW` of `cost` on the key, with the scenario's limits.
    Allow2(u64),
    /// Another client's `REFUND key n AT t0 + at`.
    Refund2(u64, u64),
}

/// The Redis calls one step of the lease sent, by command.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Calls {
    pub allow: u64,
    pub peek: u64,
    pub refund: u64,
}

/// A step and what it must get.
pub enum Outcome {
    /// `[allowed, count, remaining, retry_after_ms, reset_after_ms]` of the lease's answer.
    Allowed([i64; 5], Calls),
    /// The permits the server took back (the REFUND's answer; 0 without a call).
    Closed(u64, Calls),
    /// Another client's call and its reply (one integer: REFUND's).
    Raw(Vec<String>, Vec<i64>),
}

pub struct Step {
    pub at: u64,
    pub outcome: Outcome,
}

pub struct Scenario {
    pub name: &'static str,
    /// (window s, max), the first one first.
    pub limits: Vec<(u64, u64)>,
    pub size: u64,
    pub duration_ms: u64,
    /// Making the lease object fails: `size` above a limit's max.
    pub invalid: bool,
    pub steps: Vec<Step>,
}

/// The lease object's state, as the policy keeps it.
struct Leaser<'a> {
    limits: &'a [(u64, u64)],
    size: u64,
    ms: u64,
    /// Permits of the current lease not handed out yet.
    left: u64,
    /// The current lease's reply and the time it was taken (its `now`).
    reply: Option<(Answer, u64)>,
    /// Before this time, the last lease reply showed no permit left: a PEEK learns the wait first.
    full_until: u64,
    /// A refused PEEK's answer, the time it was sent and until when it holds.
    refused: Option<(Answer, u64, u64)>,
    calls: Calls,
}

impl Leaser<'_> {
    fn live(&self, t: u64) -> bool {
        self.left > 0 && self.reply.as_ref().is_some_and(|(_, at)| t < at + self.ms)
    }

    fn allow(&mut self, log: &mut Model, t: u64) -> [i64; 5] {
        if self.live(t) {
            self.left -= 1;
            return self.held(t);
        }
        self.drop_lease(log);
        if let Some((r, sent, until)) = &self.refused {
            if t < *until {
                return run_down(r, t - sent);
            }
            self.refused = None;
        }
        if t < self.full_until {
            let r = self.peek(log, t);
            if r.head[0] == 0 {
                return plain(&r);
            }
        }
        let r = match self.take(log, t, self.size) {
            Ok(answer) => return answer,
            Err(r) => r,
        };
        let fits = least(&r);
        if fits >= 1
            && let Ok(answer) = self.take(log, t, fits)
        {
            return answer;
        }
        // The helpers lease one permit when this PEEK admits (room freed by another caller
        // since the refused lease): no scenario here has such a caller.
        let r = self.peek(log, t);
        assert_eq!(r.head[0], 0, "a PEEK admits right after a refused lease");
        plain(&r)
    }

    /// A lease of `n`: admitted, its first permit; refused, the reply.
    fn take(&mut self, log: &mut Model, t: u64, n: u64) -> Result<[i64; 5], Answer> {
        let options = Options {
            lease: self.ms,
            ..Options::default()
        };
        let r = log.allow_with(self.limits, t, n, options);
        self.calls.allow += 1;
        assert!(r.head[3] >= 0, "a lease of {n} never fits");
        self.full_until = if least(&r) == 0 {
            t + r.head[3] as u64
        } else {
            0
        };
        if r.head[0] == 0 {
            return Err(r);
        }
        self.reply = Some((r, t));
        self.left = n - 1;
        Ok(self.held(t))
    }

    fn peek(&mut self, log: &Model, t: u64) -> Answer {
        let r = log.peek_with(self.limits, t, 1, Options::default());
        self.calls.peek += 1;
        self.full_until = 0;
        if r.head[0] == 0 && r.head[3] > 0 {
            self.refused = Some((r.clone(), t, t + r.head[3] as u64));
        }
        r
    }

    /// Ends the current lease: its unused permits go back, which forgets every refusal.
    fn drop_lease(&mut self, log: &mut Model) -> u64 {
        let unused = self.left;
        self.left = 0;
        let Some((_, at)) = self.reply.take() else {
            return 0;
        };
        if unused == 0 {
            return 0;
        }
        self.calls.refund += 1;
        self.refused = None;
        self.full_until = 0;
        log.refund(unused, Some(at + self.ms))
    }

    /// The lease's reply as of `t`: permits still held count as free, its waits run down.
    fn held(&self, t: u64) -> [i64; 5] {
        let (r, at) = self.reply.as_ref().expect("a lease");
        let left = self.left as i64;
        let elapsed = (t - at) as i64;
        let free = r.head[2] + left;
        let retry = if free >= 1 {
            0
        } else {
            (r.head[3] - elapsed).max(0)
        };
        [
            1,
            r.head[1] - left,
            free,
            retry,
            (r.head[4] - elapsed).max(0),
        ]
    }
}

fn plain(r: &Answer) -> [i64; 5] {
    [r.head[0], r.head[1], r.head[2], r.head[3], r.head[4]]
}

/// A remembered refusal `since` ms after its call: its waits run down.
fn run_down(r: &Answer, since: u64) -> [i64; 5] {
    let since = since as i64;
    let h = r.head;
    [
        h[0],
        h[1],
        h[2],
        (h[3] - since).max(0),
        (h[4] - since).max(0),
    ]
}

/// The fewest permits left in any limit of a reply.
fn least(r: &Answer) -> u64 {
    r.limits
        .iter()
        .map(|l| l[1])
        .min()
        .unwrap_or(r.head[2])
        .max(0) as u64
}

/// Plays `ops` (each at its `at`) through the policy and the model.
fn play(name: &'static str, limits: &[(u64, u64)], size: u64, ops: &[(u64, Op)]) -> Scenario {
    const MS: u64 = 60_000;
    let mut log = Model::default();
    let mut lease = Leaser {
        limits,
        size,
        ms: MS,
        left: 0,
        reply: None,
        full_until: 0,
        refused: None,
        calls: Calls::default(),
    };
    let mut steps = Vec::new();
    for &(at, op) in ops {
        let t = T0 + at;
        lease.calls = Calls::default();
        let outcome = match op {
            Op::Allow => {
                let reply = lease.allow(&mut log, t);
                Outcome::Allowed(reply, lease.calls)
            }
            Op::Close => {
                let back = lease.drop_lease(&mut log);
                Outcome::Closed(back, lease.calls)
            }
            Op::Allow2(cost) => {
                let (w, m) = limits[0];
                let mut argv = words(&["ALLOW", KEY, &w.to_string(), &m.to_string()]);
                argv.push(t.to_string());
                argv.extend(words(&["COST", &cost.to_string()]));
                for &(w, m) in &limits[1..] {
                    argv.extend(words(&["LIMIT", &w.to_string(), &m.to_string()]));
                }
                let reply = log.allow_limits(limits, t, cost);
                Outcome::Raw(argv, reply)
            }
            Op::Refund2(n, at) => {
                let argv = words(&["REFUND", KEY, &n.to_string(), "AT", &(T0 + at).to_string()]);
                let back = log.refund(n, Some(T0 + at));
                Outcome::Raw(argv, vec![back as i64])
            }
        };
        steps.push(Step { at, outcome });
    }
    Scenario {
        name,
        limits: limits.to_vec(),
        size,
        duration_ms: MS,
        invalid: false,
        steps,
    }
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// Every scenario.
pub fn scenarios() -> Vec<Scenario> {
    use Op::*;
    let allows = |from: u64, n: u64| (from..from + n).map(|at| (at, Allow));
    let mut out = vec![
        play(
            "a lease hands out from memory, then a new one when spent",
            &[(600, 10)],
            4,
            &[allows(0, 5).collect::<Vec<_>>(), vec![(5, Close)]].concat(),
        ),
        play(
            "a lease that ended gives its unused permits back before the next",
            &[(600, 10)],
            4,
            &[
                (0, Allow),
                (59_999, Allow),
                (60_000, Allow),
                (60_001, Close),
            ],
        ),
        play(
            "near the limit, a lease of what is left, then a refusal remembered until its wait",
            &[(600, 10)],
            4,
            &[
                (0, Allow2(7)),
                (1, Allow),
                (2, Allow),
                (3, Allow),
                (4, Allow),
                (5, Allow),
                (599_999, Allow),
                (600_000, Allow),
                (600_001, Close),
            ],
        ),
        play(
            "exactly to the last permit over several leases",
            &[(600, 10)],
            4,
            &[allows(0, 11).collect::<Vec<_>>(), vec![(11, Close)]].concat(),
        ),
        play(
            "two limits: the tighter one sizes the last lease",
            &[(600, 20), (60, 6)],
            4,
            &[allows(0, 8).collect::<Vec<_>>(), vec![(8, Close)]].concat(),
        ),
        play(
            "a remembered refusal holds whatever other clients do",
            &[(600, 5)],
            5,
            &[
                allows(0, 6).collect::<Vec<_>>(),
                vec![(6, Refund2(5, 60_000)), (7, Allow), (8, Close)],
            ]
            .concat(),
        ),
        play(
            "close gives the unused permits back, once",
            &[(600, 10)],
            4,
            &[(0, Allow), (1, Allow), (2, Close), (3, Close)],
        ),
        play(
            "a lease refused with nothing left: a PEEK learns the wait",
            &[(600, 10)],
            4,
            &[
                (0, Allow),
                (1, Allow2(6)),
                (2, Allow),
                (3, Allow),
                (4, Allow),
                (5, Allow),
                (6, Close),
            ],
        ),
    ];
    out.push(Scenario {
        name: "a size above a limit's max is an error",
        limits: vec![(600, 10), (60, 3)],
        size: 4,
        duration_ms: 60_000,
        invalid: true,
        steps: Vec::new(),
    });
    out
}

fn calls_json(c: &Calls) -> String {
    format!(
        "{{\"allow\": {}, \"peek\": {}, \"refund\": {}}}",
        c.allow, c.peek, c.refund
    )
}

fn ints(v: &[i64]) -> String {
    let s: Vec<String> = v.iter().map(i64::to_string).collect();
    format!("[{}]", s.join(", "))
}

/// The spec file: one line per step.
pub fn render(scenarios: &[Scenario]) -> String {
    let mut out = String::new();
    out.push_str("{\n  \"about\": \"Lease scenarios: spec/README.md (Leases); made by testkit/src/spec_leases.rs\",\n");
    let _ = writeln!(out, "  \"t0\": {T0},");
    out.push_str("  \"scenarios\": [\n");
    for (i, s) in scenarios.iter().enumerate() {
        let limits: Vec<String> = s
            .limits
            .iter()
            .map(|(w, m)| format!("[{w}, {m}]"))
            .collect();
        let _ = write!(
            out,
            "    {{\"name\": \"{}\", \"key\": \"{KEY}\", \"limits\": [{}], \"size\": {}, \"duration_ms\": {},",
            s.name,
            limits.join(", "),
            s.size,
            s.duration_ms
        );
        if s.invalid {
            out.push_str(" \"invalid\": true,");
        }
        out.push_str(" \"steps\": [");
        for (j, step) in s.steps.iter().enumerate() {
            out.push_str(if j == 0 { "\n" } else { ",\n" });
            let at = step.at;
            let _ = match &step.outcome {
                Outcome::Allowed(reply, calls) => write!(
                    out,
                    "      {{\"at\": {at}, \"op\": \"allow\", \"reply\": {}, \"calls\": {}}}",
                    ints(reply),
                    calls_json(calls)
                ),
                Outcome::Closed(back, calls) => write!(
                    out,
                    "      {{\"at\": {at}, \"op\": \"close\", \"returned\": {back}, \"calls\": {}}}",
                    calls_json(calls)
                ),
                Outcome::Raw(argv, reply) => {
                    let argv: Vec<String> = argv.iter().map(|w| format!("\"{w}\"")).collect();
                    // REFUND answers an integer, ALLOW an array.
                    let reply = match reply.as_slice() {
                        [n] => n.to_string(),
                        _ => ints(reply),
                    };
                    write!(
                        out,
                        "      {{\"at\": {at}, \"op\": \"call\", \"argv\": [{}], \"reply\": {reply}}}",
                        argv.join(", "),
                    )
                }
            };
        }
        out.push_str(if s.steps.is_empty() { "]}" } else { "\n    ]}" });
        out.push_str(if i + 1 < scenarios.len() { ",\n" } else { "\n" });
    }
    out.push_str("  ]\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `spec/leases.json` is what the generator makes: regenerate it after changing the model,
    /// the policy or a scenario.
    #[test]
    fn the_checked_in_lease_spec_is_current() {
        crate::spec::assert_checked_in("leases.json", "-- leases ", &render(&scenarios()));
    }

    #[test]
    fn scenarios_show_every_path_of_the_policy() {
        let all = scenarios();
        let steps = || all.iter().flat_map(|s| &s.steps);
        let allowed = |pred: &dyn Fn(&[i64; 5], &Calls) -> bool| {
            steps().any(|s| matches!(&s.outcome, Outcome::Allowed(r, c) if pred(r, c)))
        };
        // From memory, from a lease call, a lease of what is left (two ALLOWs), a refusal from a
        // PEEK, a refusal from memory, a lease's end refunding before the next.
        assert!(allowed(&|r, c| r[0] == 1 && *c == Calls::default()));
        assert!(allowed(&|r, c| r[0] == 1 && c.allow == 1));
        assert!(allowed(&|r, c| r[0] == 1 && c.allow == 2));
        assert!(allowed(&|r, c| r[0] == 0 && c.peek == 1));
        assert!(allowed(&|r, c| r[0] == 0
            && *c == Calls::default()
            && r[3] > 0));
        assert!(allowed(&|_, c| c.refund == 1 && c.allow == 1));
        assert!(steps().any(|s| matches!(s.outcome, Outcome::Closed(n, _) if n > 0)));
        assert!(
            steps().any(|s| matches!(s.outcome, Outcome::Closed(0, c) if c == Calls::default()))
        );
        assert!(all.iter().any(|s| s.invalid));
    }

    /// Within the shortest window of a scenario, the lease and the other clients together are
    /// admitted at most the smallest max (plus what other clients refunded).
    #[test]
    fn no_limit_is_ever_exceeded() {
        for s in scenarios() {
            let window = s.limits.iter().map(|l| l.0 * 1000).min().unwrap();
            let steps: Vec<&Step> = s.steps.iter().filter(|st| st.at < window).collect();
            let admitted = steps
                .iter()
                .filter(|st| matches!(st.outcome, Outcome::Allowed(r, _) if r[0] == 1))
                .count() as u64;
            let others: u64 = steps
                .iter()
                .filter_map(|st| match &st.outcome {
                    Outcome::Raw(argv, r) if argv[0] == "ALLOW" && r[0] == 1 => argv
                        [argv.iter().position(|w| w == "COST").unwrap() + 1]
                        .parse::<u64>()
                        .ok(),
                    _ => None,
                })
                .sum();
            let refunded: u64 = steps
                .iter()
                .filter_map(|st| match &st.outcome {
                    Outcome::Raw(argv, r) if argv[0] == "REFUND" => Some(r[0] as u64),
                    _ => None,
                })
                .sum();
            let max = s.limits.iter().map(|l| l.1).min().unwrap();
            assert!(admitted + others <= max + refunded, "{}", s.name);
        }
    }
}
