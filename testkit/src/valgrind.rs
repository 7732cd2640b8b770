//! `redis-server` with the module, run under valgrind's memcheck, and the reading of its report.
//! The harness's `Server` cannot wrap the binary, hence this small runner of its own.
#![allow(dead_code)]

use crate::harness::{module_path, wait_until};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Everything under valgrind is ~50x slower: generous, bounded waits.
pub const SLOW: Duration = Duration::from_secs(180);

pub struct Valgrind {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
}

impl Valgrind {
    pub fn start() -> Valgrind {
        let ok = Command::new("valgrind")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "valgrind is not installed (apt-get install valgrind)");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = std::env::temp_dir().join(format!(
            "slidingwindow-valgrind-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("valgrind dir");
        let server = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new("valgrind")
            .args([
                "--leak-check=full",
                "--show-leak-kinds=definite",
                "--errors-for-leak-kinds=definite",
                "--error-exitcode=99",
                "--num-callers=40",
                // Debian's redis-server allocates through libjemalloc: track those calls too.
                "--soname-synonyms=somalloc=*jemalloc*",
            ])
            .arg(format!(
                "--suppressions={}/valgrind.supp",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg(format!("--log-file={}", dir.join("valgrind.log").display()))
            .arg(server)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(&dir)
            .arg("--loadmodule")
            .arg(module_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn valgrind");
        let v = Valgrind {
            child: Some(child),
            port,
            dir,
        };
        wait_until(SLOW, "redis-server under valgrind to answer PING", || {
            v.try_client()
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c).ok())
                .is_some()
        });
        v
    }

    fn try_client(&self) -> Option<redis::Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).ok()?;
        let con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .ok()?;
        con.set_read_timeout(Some(SLOW)).ok()?;
        Some(con)
    }

    pub fn client(&self) -> redis::Connection {
        self.try_client()
            .expect("connect to redis-server under valgrind")
    }

    /// SHUTDOWN NOSAVE, then waits for valgrind to finish its report; returns the report.
    pub fn shutdown(mut self) -> String {
        // The connection drops as the server exits, so the reply is an I/O error.
        let _ = redis::cmd("SHUTDOWN")
            .arg("NOSAVE")
            .query::<()>(&mut self.client());
        let mut child = self.child.take().expect("running");
        let mut exited = false;
        wait_until(SLOW, "valgrind to exit", || {
            exited = matches!(child.try_wait(), Ok(Some(_)));
            exited
        });
        std::fs::read_to_string(self.dir.join("valgrind.log")).expect("valgrind log")
    }
}

impl Drop for Valgrind {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The report's records (one error or leak each), without the `==pid==` prefixes.
pub fn records(log: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in log.lines() {
        let text = match line.find("== ") {
            Some(i) if line.starts_with("==") => &line[i + 3..],
            _ => line.trim_start_matches(|c: char| c == '=' || c.is_ascii_digit()),
        };
        if text.trim().is_empty() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push_str(text);
            cur.push('\n');
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Records that blame the module: a definite leak or a memory error with a module frame.
pub fn module_faults(log: &str) -> Vec<String> {
    const KINDS: [&str; 7] = [
        "definitely lost",
        "Invalid read",
        "Invalid write",
        "Invalid free",
        "Mismatched free",
        "uninitialised",
        "Source and destination overlap",
    ];
    records(log)
        .into_iter()
        .filter(|r| r.contains("slidingwindow") && KINDS.iter().any(|k| r.contains(k)))
        .collect()
}

/// `N` in the report's "total heap usage: N allocs": proof that valgrind saw the allocations.
pub fn heap_allocs(log: &str) -> u64 {
    log.lines()
        .find_map(|l| {
            let rest = l.split("total heap usage: ").nth(1)?;
            rest.split(' ').next()?.replace(',', "").parse().ok()
        })
        .unwrap_or(0)
}
