//! Request builders: a check of one key ([`Check`]) or of several keys at once ([`CheckAll`]) and
//! a refund ([`Refund`]). They borrow their keys and limits, so building one per request copies
//! nothing; [`Call`] validates what the contract validates and writes the command once.

use crate::error::Error;
use crate::limit::{Limit, MAX_EXACT, MAX_KEYS, MAX_LIMITS, Now, logged_score};
use crate::reply::{Reply, Shape};
use redis::cluster_routing::{Route, SlotAddr};
use redis::{Cmd, Value};

/// The options every check has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Options {
    now: Now,
    cost: u64,
    lease_ms: Option<u64>,
    precision: Option<u64>,
    detail: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            now: Now::Server,
            cost: 1,
            lease_ms: None,
            precision: None,
            detail: false,
        }
    }
}

impl Options {
    fn check(&self) -> Result<(), Error> {
        self.now.check("now")?;
        if !(1..=MAX_EXACT).contains(&self.cost) {
            return Err(Error::Invalid(format!(
                "cost must be between 1 and {MAX_EXACT}, not {}",
                self.cost
            )));
        }
        if let Some(ms) = self.lease_ms {
            // With `*` the server checks `now + ms` on its own clock.
            let start = match self.now {
                Now::Ms(t) => t,
                Now::Server => 0,
            };
            if ms == 0 || ms > MAX_EXACT - start {
                return Err(Error::Invalid(format!(
                    "LEASE must be between 1 and {} ms (now + LEASE <= 2^53), not {ms}",
                    MAX_EXACT - start
                )));
            }
        }
        if let Some(p) = self.precision {
            // With `*` the server checks the rounded score on its own clock.
            let start = match self.now {
                Now::Ms(t) => t + self.lease_ms.unwrap_or(0),
                Now::Server => 0,
            };
            if !(1..=MAX_EXACT).contains(&p) || logged_score(start, Some(p)) > MAX_EXACT {
                return Err(Error::Invalid(format!(
                    "PRECISION must be between 1 and {MAX_EXACT} (now + LEASE rounded up to a multiple of PRECISION <= 2^53), not {p}"
                )));
            }
        }
        Ok(())
    }

    /// `now [COST n] [LEASE ms] [PRECISION p] [DETAIL]`; COST 1 is the default and is left out.
    fn write(&self, cmd: &mut Cmd) {
        write_now(cmd, self.now);
        if self.cost != 1 {
            cmd.arg("COST").arg(self.cost);
        }
        if let Some(ms) = self.lease_ms {
            cmd.arg("LEASE").arg(ms);
        }
        if let Some(p) = self.precision {
            cmd.arg("PRECISION").arg(p);
        }
        if self.detail {
            cmd.arg("DETAIL");
        }
    }
}

fn write_now(cmd: &mut Cmd, now: Now) {
    match now {
        Now::Server => cmd.arg("*"),
        Now::Ms(t) => cmd.arg(t),
    };
}

macro_rules! options {
    () => {
        /// When the call is decided (default `*`, the server's clock).
        pub fn now(mut self, now: Now) -> Self {
            self.options.now = now;
            self
        }

        /// What the request weighs (default 1).
        pub fn cost(mut self, n: u64) -> Self {
            self.options.cost = n;
            self
        }

        /// `LEASE ms`: if admitted, the `cost` permits are logged at `now + ms`, for the caller to
        /// hand out until then (see [`crate::Lease`]).
        pub fn lease(mut self, ms: u64) -> Self {
            self.options.lease_ms = Some(ms);
            self
        }

        /// `PRECISION p`: if admitted, the members are logged at `now` (or `now + ms`) rounded up
        /// to a multiple of `p` ms, so that a busy key holds a bounded number of distinct scores;
        /// each request may count up to `p` ms longer (contract, "Coarse times"). A refund of it
        /// passes [`crate::logged_score`] as its `AT`. `None` (the default) leaves it out.
        pub fn precision(mut self, p: Option<u64>) -> Self {
            self.options.precision = p;
            self
        }

        /// `DETAIL`: the reply carries every limit's state and the `now` used.
        pub fn detail(mut self, on: bool) -> Self {
            self.options.detail = on;
            self
        }
    };
}

/// ALLOW or PEEK of one key against its limits (the first is the positional one, the others
/// `LIMIT` options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check<'a> {
    key: &'a [u8],
    limits: &'a [Limit],
    options: Options,
}

impl<'a> Check<'a> {
    pub fn new(key: &'a [u8], limits: &'a [Limit]) -> Check<'a> {
        Check {
            key,
            limits,
            options: Options::default(),
        }
    }

    options!();

    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    pub fn limits(&self) -> &'a [Limit] {
        self.limits
    }
}

/// One key of an ALLOWALL or PEEKALL with its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keyed<'a> {
    pub key: &'a [u8],
    pub limits: &'a [Limit],
}

impl<'a> Keyed<'a> {
    pub fn new(key: &'a [u8], limits: &'a [Limit]) -> Keyed<'a> {
        Keyed { key, limits }
    }
}

/// ALLOWALL or PEEKALL: one request against the limits of several keys, all or nothing. The
/// reply's binding index counts the limits in order: the first key's, then the second's, ...
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckAll<'a> {
    keys: &'a [Keyed<'a>],
    options: Options,
}

impl<'a> CheckAll<'a> {
    pub fn new(keys: &'a [Keyed<'a>]) -> CheckAll<'a> {
        CheckAll {
            keys,
            options: Options::default(),
        }
    }

    options!();

    pub fn keys(&self) -> &'a [Keyed<'a>] {
        self.keys
    }

    /// The key (its position) and its limit that a reply's binding index names.
    pub fn locate(&self, binding: usize) -> Option<(usize, &'a Limit)> {
        let mut rest = binding;
        for (i, k) in self.keys.iter().enumerate() {
            match k.limits.get(rest) {
                Some(l) => return Some((i, l)),
                None => rest -= k.limits.len(),
            }
        }
        None
    }
}

/// `SLIDINGWINDOW.REFUND key n [AT ts]`: takes back up to `n` of the newest requests logged at or
/// before `ts` (without `AT`: whatever their time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refund<'a> {
    key: &'a [u8],
    n: u64,
    at: Option<Now>,
}

impl<'a> Refund<'a> {
    pub fn new(key: &'a [u8], n: u64) -> Refund<'a> {
        Refund { key, n, at: None }
    }

    /// Only requests logged at or before `at` (pass the `now` of the call being taken back).
    pub fn at(mut self, at: Now) -> Self {
        self.at = Some(at);
        self
    }

    /// The refund of `n` a call admitted at `now_ms` (DETAIL's `now`): `AT` the score it logged
    /// them at, `now_ms` rounded up to the call's `precision` ([`logged_score`]).
    pub fn logged(key: &'a [u8], n: u64, now_ms: u64, precision: Option<u64>) -> Refund<'a> {
        Refund::new(key, n).at(Now::Ms(logged_score(now_ms, precision)))
    }

    pub(crate) fn command(&self) -> Result<(Cmd, Route), Error> {
        if !(1..=MAX_EXACT).contains(&self.n) {
            return Err(Error::Invalid(format!(
                "refund n must be between 1 and {MAX_EXACT}, not {}",
                self.n
            )));
        }
        let mut cmd = redis::cmd("SLIDINGWINDOW.REFUND");
        cmd.arg(self.key).arg(self.n);
        if let Some(at) = self.at {
            at.check("AT")?;
            cmd.arg("AT");
            write_now(&mut cmd, at);
        }
        Ok((cmd, Route::with_key(self.key, SlotAddr::Master)))
    }
}

/// A check made into its command, with the shape its reply must have and its cluster route (the
/// slot of its first key). Build it once and send it with [`crate::Client::call`] or in a
/// [`crate::Batch`].
#[derive(Debug, Clone)]
pub struct Call {
    cmd: Cmd,
    shape: Shape,
    route: Route,
}

impl Call {
    /// `SLIDINGWINDOW.ALLOW key window max now [COST n] [LIMIT window max]... [LEASE ms] [PRECISION p] [DETAIL]`.
    pub fn allow(c: &Check<'_>) -> Result<Call, Error> {
        Call::one("SLIDINGWINDOW.ALLOW", c)
    }

    /// `SLIDINGWINDOW.PEEK`, the same arguments: what ALLOW would answer, changing nothing.
    pub fn peek(c: &Check<'_>) -> Result<Call, Error> {
        Call::one("SLIDINGWINDOW.PEEK", c)
    }

    /// `SLIDINGWINDOW.ALLOWALL numkeys key... now [COST n] [LEASE ms] [PRECISION p] [DETAIL] LIMIT keyno window max...`.
    pub fn allow_all(c: &CheckAll<'_>) -> Result<Call, Error> {
        Call::all("SLIDINGWINDOW.ALLOWALL", c)
    }

    /// `SLIDINGWINDOW.PEEKALL`, the same arguments.
    pub fn peek_all(c: &CheckAll<'_>) -> Result<Call, Error> {
        Call::all("SLIDINGWINDOW.PEEKALL", c)
    }

    fn one(name: &str, c: &Check<'_>) -> Result<Call, Error> {
        let (first, more) = match c.limits {
            [first, more @ ..] if c.limits.len() <= MAX_LIMITS => (first, more),
            _ => {
                return Err(Error::Invalid(format!(
                    "a key needs 1 to {MAX_LIMITS} limits, not {}",
                    c.limits.len()
                )));
            }
        };
        c.options.check()?;
        let mut cmd = redis::cmd(name);
        cmd.arg(c.key).arg(first.window_s()).arg(first.max());
        c.options.write(&mut cmd);
        for l in more {
            cmd.arg("LIMIT").arg(l.window_s()).arg(l.max());
        }
        Ok(Call {
            cmd,
            shape: Shape {
                limits: c.limits.len(),
                sixth: !more.is_empty(),
                detail: c.options.detail,
            },
            route: Route::with_key(c.key, SlotAddr::Master),
        })
    }

    fn all(name: &str, c: &CheckAll<'_>) -> Result<Call, Error> {
        let Some(first) = c.keys.first().filter(|_| c.keys.len() <= MAX_KEYS) else {
            return Err(Error::Invalid(format!(
                "ALLOWALL takes 1 to {MAX_KEYS} keys, not {}",
                c.keys.len()
            )));
        };
        for (i, k) in c.keys.iter().enumerate() {
            if !(1..=MAX_LIMITS).contains(&k.limits.len()) {
                return Err(Error::Invalid(format!(
                    "key {} needs 1 to {MAX_LIMITS} limits, not {}",
                    i + 1,
                    k.limits.len()
                )));
            }
            if let Some(j) = c.keys[..i].iter().position(|o| o.key == k.key) {
                return Err(Error::Invalid(format!(
                    "key {} is key {} again: keys must be distinct",
                    i + 1,
                    j + 1
                )));
            }
        }
        c.options.check()?;
        let mut cmd = redis::cmd(name);
        cmd.arg(c.keys.len());
        for k in c.keys {
            cmd.arg(k.key);
        }
        c.options.write(&mut cmd);
        let mut limits = 0;
        for (i, k) in c.keys.iter().enumerate() {
            for l in k.limits {
                cmd.arg("LIMIT").arg(i + 1).arg(l.window_s()).arg(l.max());
            }
            limits += k.limits.len();
        }
        Ok(Call {
            cmd,
            shape: Shape {
                limits,
                sixth: true,
                detail: c.options.detail,
            },
            route: Route::with_key(first.key, SlotAddr::Master),
        })
    }

    /// The command as it is sent.
    pub fn cmd(&self) -> &Cmd {
        &self.cmd
    }

    /// Its reply, typed; an error reply is [`Error::Server`] with its text.
    pub fn parse(&self, reply: &Value) -> Result<Reply, Error> {
        self.shape.parse(reply)
    }

    pub(crate) fn route(&self) -> Route {
        self.route
    }

    pub(crate) fn shape(&self) -> Shape {
        self.shape
    }

    pub(crate) fn into_cmd(self) -> Cmd {
        self.cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command's arguments, separated by spaces.
    fn text(cmd: &Cmd) -> String {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).to_string(),
                _ => "?".to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn lim(w: u64, m: u64) -> Limit {
        Limit::new(w, m).unwrap()
    }

    fn invalid(r: Result<Call, Error>) -> String {
        match r {
            Err(Error::Invalid(why)) => why,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn allow_and_peek() {
        let limits = [lim(1, 10), lim(60, 100)];
        let c = Check::new(b"rl:{k}", &limits).now(Now::Ms(1234));
        assert_eq!(
            text(Call::allow(&c).unwrap().cmd()),
            "SLIDINGWINDOW.ALLOW rl:{k} 1 10 1234 LIMIT 60 100"
        );
        let c = Check::new(b"k", &limits[..1])
            .cost(3)
            .lease(100)
            .precision(Some(1000))
            .detail(true);
        assert_eq!(
            text(Call::peek(&c).unwrap().cmd()),
            "SLIDINGWINDOW.PEEK k 1 10 * COST 3 LEASE 100 PRECISION 1000 DETAIL"
        );
        let one = Call::allow(&Check::new(b"k", &limits[..1])).unwrap();
        assert_eq!(
            one.shape,
            Shape {
                limits: 1,
                sixth: false,
                detail: false
            }
        );
        assert_eq!(
            Call::allow(&c).unwrap().shape,
            Shape {
                limits: 1,
                sixth: false,
                detail: true
            }
        );
    }

    #[test]
    fn allow_all() {
        let user = [lim(1, 10)];
        let tenant = [lim(60, 1000), lim(3600, 5000)];
        let keys = [
            Keyed::new(b"rl:{acme}:k", &user),
            Keyed::new(b"rl:{acme}", &tenant),
        ];
        let c = CheckAll::new(&keys).now(Now::Ms(99));
        let call = Call::allow_all(&c).unwrap();
        assert_eq!(
            text(call.cmd()),
            "SLIDINGWINDOW.ALLOWALL 2 rl:{acme}:k rl:{acme} 99 LIMIT 1 1 10 LIMIT 2 60 1000 LIMIT 2 3600 5000"
        );
        assert_eq!((call.shape.limits, call.shape.sixth), (3, true));
        assert_eq!(c.locate(0), Some((0, &user[0])));
        assert_eq!(c.locate(2), Some((1, &tenant[1])));
        assert_eq!(c.locate(3), None);
        let peek = Call::peek_all(&c.cost(2).precision(Some(10)).detail(true)).unwrap();
        let peek = text(peek.cmd());
        assert!(
            peek.starts_with(
                "SLIDINGWINDOW.PEEKALL 2 rl:{acme}:k rl:{acme} 99 COST 2 PRECISION 10 DETAIL "
            ),
            "{peek}"
        );
        // The route is the first key's slot: the hash tag's.
        assert_eq!(call.route, Route::with_key(b"{acme}", SlotAddr::Master));
    }

    #[test]
    fn what_the_contract_refuses_is_refused_before_sending() {
        let l = [lim(1, 10)];
        let seventeen = [lim(1, 10); 17];
        let k = |limits| Check::new(b"k", limits);
        assert!(invalid(Call::allow(&k(&[]))).contains("1 to 16 limits"));
        assert!(invalid(Call::allow(&k(&seventeen))).contains("not 17"));
        assert!(Call::allow(&k(&seventeen[..16])).is_ok());
        assert!(invalid(Call::allow(&k(&l).cost(0))).starts_with("cost"));
        assert!(invalid(Call::allow(&k(&l).cost(MAX_EXACT + 1))).starts_with("cost"));
        assert!(Call::allow(&k(&l).cost(MAX_EXACT)).is_ok());
        assert!(invalid(Call::allow(&k(&l).now(Now::Ms(MAX_EXACT + 1)))).starts_with("now"));
        assert!(invalid(Call::allow(&k(&l).lease(0))).starts_with("LEASE"));
        let late = k(&l).now(Now::Ms(MAX_EXACT - 10));
        assert!(Call::allow(&late.lease(10)).is_ok());
        assert!(invalid(Call::allow(&late.lease(11))).starts_with("LEASE"));
        assert!(invalid(Call::allow(&k(&l).lease(MAX_EXACT + 1))).starts_with("LEASE"));
        for bad in [0, MAX_EXACT + 1] {
            assert!(invalid(Call::allow(&k(&l).precision(Some(bad)))).starts_with("PRECISION"));
        }
        assert!(Call::allow(&k(&l).precision(Some(MAX_EXACT))).is_ok());
        // The rounded score: now + LEASE up to a multiple of p, at most 2^53.
        let edge = k(&l).now(Now::Ms(MAX_EXACT - 10)).lease(5);
        assert!(Call::allow(&edge.precision(Some(5))).is_ok());
        let half = MAX_EXACT / 2 + 1;
        assert!(Call::allow(&k(&l).now(Now::Ms(half)).precision(Some(half))).is_ok());
        let over = k(&l).now(Now::Ms(half)).lease(1).precision(Some(half));
        assert!(invalid(Call::peek(&over)).starts_with("PRECISION"));
        let key = |key: &'static [u8]| Keyed { key, limits: &l };
        assert!(invalid(Call::allow_all(&CheckAll::new(&[]))).contains("1 to 16 keys"));
        let dup = [key(b"a"), key(b"b"), key(b"a")];
        assert_eq!(
            invalid(Call::allow_all(&CheckAll::new(&dup))),
            "key 3 is key 1 again: keys must be distinct"
        );
        let bare = [key(b"a"), Keyed::new(b"b", &[])];
        assert!(invalid(Call::allow_all(&CheckAll::new(&bare))).starts_with("key 2 needs"));
        let names: Vec<Vec<u8>> = (0..17).map(|i| format!("k{i}").into_bytes()).collect();
        let many: Vec<Keyed> = names.iter().map(|n| Keyed::new(n, &l)).collect();
        assert!(invalid(Call::allow_all(&CheckAll::new(&many))).contains("not 17"));
        assert!(Call::allow_all(&CheckAll::new(&many[..16])).is_ok());
    }

    #[test]
    fn refunds() {
        let (cmd, route) = Refund::new(b"k", 2).at(Now::Ms(77)).command().unwrap();
        assert_eq!(text(&cmd), "SLIDINGWINDOW.REFUND k 2 AT 77");
        assert_eq!(route, Route::with_key(b"k", SlotAddr::Master));
        let (cmd, _) = Refund::new(b"k", 1).command().unwrap();
        assert_eq!(text(&cmd), "SLIDINGWINDOW.REFUND k 1");
        // At the score the call logged: its `now` rounded up to the precision.
        for (now_ms, precision, at) in [
            (1234, None, 1234),
            (1234, Some(1), 1234),
            (1234, Some(100), 1300),
            (1300, Some(100), 1300),
            (0, Some(100), 0),
        ] {
            let (cmd, _) = Refund::logged(b"k", 3, now_ms, precision)
                .command()
                .unwrap();
            assert_eq!(text(&cmd), format!("SLIDINGWINDOW.REFUND k 3 AT {at}"));
        }
        let (cmd, _) = Refund::new(b"k", 1).at(Now::Server).command().unwrap();
        assert_eq!(text(&cmd), "SLIDINGWINDOW.REFUND k 1 AT *");
        for bad in [
            Refund::new(b"k", 0),
            Refund::new(b"k", MAX_EXACT + 1),
            Refund::new(b"k", 1).at(Now::Ms(MAX_EXACT + 1)),
        ] {
            assert!(matches!(bad.command(), Err(Error::Invalid(_))), "{bad:?}");
        }
    }
}
