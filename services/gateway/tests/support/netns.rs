//! Three regions on a simulated network (issue 40 item 4): a network namespace each, named after
//! the test's pid, region A joined to B and to C by a veth pair, and only addresses from
//! 198.18.0.0/15 (RFC 2544's range for network benchmarks):
//!
//! ```text
//!   region B: 198.18.0.2 (lo)            region A: 198.18.0.1 (lo)            region C: 198.18.0.3 (lo)
//!   198.18.1.2 [veth] ===40 ms one way=== [veth] 198.18.1.1
//!                                         [veth] 198.18.2.1 ===40 ms one way=== [veth] 198.18.2.2
//! ```
//!
//! A region's own traffic goes over its `lo` (0.1 ms one way with netem). The 40 ms are netem's
//! where the kernel has `sch_netem`; otherwise a TCP relay in the far region
//! (`testkit::relay`, started by a thread of the test inside that namespace) holds each chunk
//! 40 ms in each direction, in order, and the far region's gateway reaches Redis through it
//! ([`Net::redis_url`]); its own traffic is then undelayed. Cutting a region off takes region A's end of its link down. The namespaces (and the
//! veths in them) are deleted on drop, a failed test's unwinding included.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;
use testkit::netns::in_ns;
use testkit::relay::{self, Relay};

/// Between two regions, one way.
pub const ONE_WAY: Duration = Duration::from_millis(40);
/// Inside one region, one way (netem only).
pub const INSIDE: &str = "100us";

/// How the link delay is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    Netem,
    Relay,
}

pub struct Net {
    tag: String,
    pub delay: Delay,
    relays: Vec<Relay>,
}

/// `ip ARGS`; its stderr as the error.
pub fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program} {}`: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Net {
    /// The three regions, or why they cannot be made here (not root, no `ip netns`, no veth).
    pub fn build() -> Result<Net, String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root".into());
        }
        let mut net = Net {
            tag: format!("sw{}", std::process::id()),
            delay: Delay::Relay,
            relays: Vec::new(),
        };
        // Names with this pid left by a process killed before its drop ran: that process is gone.
        net.remove();
        for r in 0..3 {
            let ns = net.ns(r);
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/32", addr(r)),
                "dev",
                "lo",
            ])?;
        }
        let a = net.ns(0);
        for r in 1..3 {
            let (near, far) = net.devs(r);
            let ns = net.ns(r);
            ip(&[
                "link", "add", &near, "netns", &a, "type", "veth", "peer", "name", &far, "netns",
                &ns,
            ])?;
            ip(&[
                "-n",
                &a,
                "addr",
                "add",
                &format!("198.18.{r}.1/30"),
                "dev",
                &near,
            ])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("198.18.{r}.2/30"),
                "dev",
                &far,
            ])?;
            ip(&["-n", &a, "link", "set", &near, "up"])?;
            ip(&["-n", &ns, "link", "set", &far, "up"])?;
            let via = format!("198.18.{r}.1");
            ip(&[
                "-n",
                &ns,
                "route",
                "add",
                &format!("{}/32", addr(0)),
                "via",
                &via,
            ])?;
        }
        if net.netem(&a, "lo", INSIDE).is_ok() {
            net.delay = Delay::Netem;
            for r in 1..3 {
                net.netem(&net.ns(r), "lo", INSIDE)?;
                let (near, far) = net.devs(r);
                net.netem(&a, &near, "40ms")?;
                net.netem(&net.ns(r), &far, "40ms")?;
            }
        }
        Ok(net)
    }

    fn netem(&self, ns: &str, dev: &str, delay: &str) -> Result<(), String> {
        run(
            "ip",
            &[
                "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "netem",
                "delay", delay,
            ],
        )
    }

    /// Region `r`'s namespace (0 is A).
    pub fn ns(&self, r: usize) -> String {
        format!("{}{}", self.tag, ["a", "b", "c"][r])
    }

    /// Region `r`'s link: A's end, the far end.
    fn devs(&self, r: usize) -> (String, String) {
        (format!("{}a{r}", self.tag), format!("{}{r}a", self.tag))
    }

    /// The URL region `r`'s gateway reaches Redis at `redis` (in region A) by: directly, or
    /// through a delaying relay on its side of the link.
    pub fn redis_url(&mut self, r: usize, redis: SocketAddr) -> String {
        if r == 0 || self.delay == Delay::Netem {
            return format!("redis://{redis}");
        }
        let ip = addr(r).parse().expect("a region's address");
        let relay = in_ns(&self.ns(r), move || relay::start_on(ip, redis, ONE_WAY))
            .join()
            .expect("the relay started");
        let url = relay.redis_url();
        self.relays.push(relay);
        url
    }

    /// Region `r` cut off from A: A's end of its link down.
    pub fn cut(&self, r: usize) {
        let (near, _) = self.devs(r);
        ip(&["-n", &self.ns(0), "link", "set", &near, "down"]).expect("cut the link");
    }

    /// The link back up (with its delay).
    pub fn restore(&self, r: usize) {
        let (near, _) = self.devs(r);
        ip(&["-n", &self.ns(0), "link", "set", &near, "up"]).expect("restore the link");
        if self.delay == Delay::Netem {
            self.netem(&self.ns(0), &near, "40ms")
                .expect("the link's delay");
        }
    }

    /// What makes the 40 ms, for the test's output and the docs.
    pub fn describe(&self) -> &'static str {
        match self.delay {
            Delay::Netem => "tc netem (40 ms one way between regions, 0.1 ms inside one)",
            Delay::Relay => {
                "a user-space TCP relay holding each chunk 40 ms each way (this kernel has no \
                 sch_netem; no delay inside a region)"
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.relays.clear();
        self.remove();
    }
}

impl Net {
    /// Deletes this run's namespaces (and the veths in them) and any of its veths left in the
    /// root namespace by a half-made link; what does not exist is passed over.
    fn remove(&self) {
        let quiet = |args: &[&str]| {
            let _ = Command::new("ip")
                .args(args)
                .stderr(std::process::Stdio::null())
                .status();
        };
        for r in 0..3 {
            quiet(&["netns", "del", &self.ns(r)]);
        }
        for r in 1..3 {
            let (near, far) = self.devs(r);
            quiet(&["link", "del", &near]);
            quiet(&["link", "del", &far]);
        }
    }
}

/// Region `r`'s own address (on its `lo`).
pub fn addr(r: usize) -> String {
    format!("198.18.0.{}", r + 1)
}
