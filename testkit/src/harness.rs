//! Shared harness for the integration tests: a real `redis-server` per test, with the module
//! loaded, on a free loopback port and a fresh directory, killed and cleaned up on drop.
// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, Value};

/// How long a server gets to answer PING after it is spawned (also used for other polls).
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(10);

/// Path of the module under test: `$SLIDINGWINDOW_MODULE`, else the release build of this crate.
pub fn module_path() -> PathBuf {
    let path = match std::env::var_os("SLIDINGWINDOW_MODULE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/libslidingwindow.so"),
    };
    assert!(
        path.is_file(),
        "module {} not found: run `cargo build --release` first (or set SLIDINGWINDOW_MODULE)",
        path.display()
    );
    // redis-server resolves a relative path against its own --dir, so hand it an absolute one.
    fs::canonicalize(&path).unwrap_or(path)
}

/// The redis-server to start: `$REDIS_SERVER`, else the one on PATH.
pub fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// The server binary that `scripts/servers.sh` gives for `name` (e.g. `valkey9`), fetched into
/// target/servers/ on first use.
pub fn named_server_bin(name: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/servers.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(name)
        .output()
        .expect("run scripts/servers.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout.lines().find_map(|l| l.split('\t').nth(1));
    match (out.status.success(), path) {
        (true, Some(path)) => path.to_string(),
        _ => panic!(
            "scripts/servers.sh {name} gave no server ({}):\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The redis-cli to drive: `$REDIS_CLI`, else the one on PATH.
pub fn redis_cli_bin() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string())
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// A free port whose cluster bus port (`port + 10000`, Redis's fixed offset) is free too.
fn free_port_with_bus() -> u16 {
    for _ in 0..100 {
        let port = free_port();
        if port <= u16::MAX - 10000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
    panic!("no free port with a free port + 10000 after 100 tries");
}

fn fresh_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "slidingwindow-test-{}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos
    ));
    fs::create_dir_all(&dir).expect("create test dir");
    dir
}

/// Polls `cond` with a short pause until it holds; panics naming `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Sends one command and returns the raw reply; a server error comes back as
/// `Value::ServerError` instead of `Err`, so tests can inspect it.
pub fn call(con: &mut redis::Connection, args: &[&str]) -> Value {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    con.req_command(&cmd).expect("I/O error talking to redis")
}

/// [`call`] with owned words.
pub fn call_words(con: &mut redis::Connection, words: &[String]) -> Value {
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    call(con, &args)
}

/// [`call_words`] for a call that must not answer an error.
pub fn call_words_ok(con: &mut redis::Connection, words: &[String]) -> Value {
    let reply = call_words(con, words);
    assert!(
        error_line(&reply).is_none(),
        "{}: {reply:?}",
        words.join(" ")
    );
    reply
}

/// Same as [`call`] with binary-safe arguments.
pub fn call_bytes(con: &mut redis::Connection, args: &[&[u8]]) -> Value {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("command name is UTF-8"));
    for a in &args[1..] {
        cmd.arg(*a);
    }
    con.req_command(&cmd).expect("I/O error talking to redis")
}

/// The error line as the server sent it (`"ERR ..."`), or `None` if the reply is not an error.
pub fn error_line(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(match e.details() {
            Some(d) => format!("{} {}", e.code(), d),
            None => e.code().to_string(),
        }),
        _ => None,
    }
}

/// The reply as a vector of integers; panics (showing the reply) on anything else.
pub fn ints(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => *n,
                other => panic!("expected an integer in the array, got {other:?} (reply {v:?})"),
            })
            .collect(),
        other => panic!("expected an array of integers, got {other:?}"),
    }
}

/// Configures a server before starting it.
pub struct Builder {
    args: Vec<String>,
    module: bool,
    module_file: Option<PathBuf>,
    cluster: bool,
    config: Option<String>,
    place: Place,
    binary: Option<String>,
}

/// Where a server listens: a network namespace to start it in, the address it binds and its port.
#[derive(Clone, Default)]
struct Place {
    netns: Option<String>,
    bind: Option<String>,
    port: Option<u16>,
}

impl Builder {
    /// As managed Redis and Valkey are: no module, and none loadable (`enable-module-command no`).
    pub fn managed(self) -> Self {
        self.without_module()
            .args(["--enable-module-command", "no"])
    }

    /// Starts `binary` instead of `$REDIS_SERVER` (e.g. `named_server_bin("valkey9")`).
    pub fn binary(mut self, binary: impl Into<String>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Appends one extra `redis-server` argument (e.g. `"--appendonly"`, then `"yes"`).
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    /// Sets the module's config `slidingwindow.<name>` on the command line.
    pub fn config(self, name: &str, value: impl ToString) -> Self {
        self.args([format!("--slidingwindow.{name}"), value.to_string()])
    }

    /// An AOF written and synced on every write.
    pub fn aof_always(self) -> Self {
        self.args(["--appendonly", "yes", "--appendfsync", "always"])
    }

    /// Sets `slidingwindow.lateness` to `ms`.
    pub fn lateness(self, ms: u64) -> Self {
        self.config("lateness", ms)
    }

    /// Appends several extra `redis-server` arguments.
    pub fn args<I, S>(mut self, it: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(it.into_iter().map(Into::into));
        self
    }

    /// Keys that ALLOW creates go to `storage` (`zset` or `compact`).
    pub fn storage(self, storage: &str) -> Self {
        self.args(["--slidingwindow.storage", storage])
    }

    /// Starts a server without loading the module (to compare against plain Redis).
    pub fn without_module(mut self) -> Self {
        self.module = false;
        self
    }

    /// Loads the module at `path` instead of [`module_path`] (another build, another module).
    pub fn module(mut self, path: &Path) -> Self {
        self.module = true;
        self.module_file = Some(fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()));
        self
    }

    /// Starts from a config file holding `text` (written once into the server's directory, so
    /// that a restart reads what `CONFIG REWRITE` made of it); the arguments still apply on top.
    pub fn config_file(mut self, text: &str) -> Self {
        self.config = Some(text.to_string());
        self
    }

    /// Starts a cluster node: cluster mode on, its `nodes.conf` in its own directory, and a
    /// port whose bus port (`+10000`) is free too.
    pub fn cluster(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Starts the server inside network namespace `name` (`ip netns exec NAME redis-server ...`)
    /// and checks it is up from a thread inside that namespace; connections to it must be made
    /// from inside the namespace too (`crate::netns::in_ns`).
    pub fn netns(mut self, name: &str) -> Self {
        self.place.netns = Some(name.to_string());
        self
    }

    /// Binds the server to `addr` in place of 127.0.0.1, with protected mode off so that clients
    /// from other addresses are answered.
    pub fn bind(mut self, addr: &str) -> Self {
        self.place.bind = Some(addr.to_string());
        self
    }

    /// Listens on `port` in place of a free one (a port taken is an error, not a retry).
    pub fn port(mut self, port: u16) -> Self {
        self.place.port = Some(port);
        self
    }

    /// Starts the server; panics with its log tail when it does not start.
    pub fn start(self) -> Server {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts the server, or says why it did not start (with its log tail).
    pub fn try_start(self) -> Result<Server, String> {
        let mut last_log = String::new();
        // The port is free when probed but another process may grab it before redis binds it;
        // on that (rare) race, pick a new port and try again.
        for _ in 0..5 {
            let mut server = Server {
                child: None,
                port: match self.place.port {
                    Some(port) => port,
                    None if self.cluster => free_port_with_bus(),
                    None => free_port(),
                },
                dir: fresh_dir(),
                extra: self.args.clone(),
                module: self.module,
                module_file: self.module_file.clone(),
                cluster: self.cluster,
                config: self.config.clone(),
                place: self.place.clone(),
                binary: self.binary.clone(),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(Spawn::PortTaken(log)) if self.place.port.is_none() => last_log = log,
                Err(Spawn::PortTaken(log)) => {
                    return Err(format!(
                        "redis-server could not bind port {}; log tail:\n{log}",
                        server.port
                    ));
                }
                Err(Spawn::Failed(why)) => return Err(why),
            }
        }
        Err(format!("redis-server did not start; log tail:\n{last_log}"))
    }
}

/// Why a spawn failed: the port was taken before the server bound it (try another), or anything
/// else (said with the log tail).
enum Spawn {
    PortTaken(String),
    Failed(String),
}

/// A running `redis-server` owned by the test.
pub struct Server {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    module: bool,
    module_file: Option<PathBuf>,
    cluster: bool,
    config: Option<String>,
    place: Place,
    binary: Option<String>,
}

impl Server {
    pub fn builder() -> Builder {
        Builder {
            args: Vec::new(),
            module: true,
            module_file: None,
            cluster: false,
            config: None,
            place: Place::default(),
            binary: None,
        }
    }

    /// A server with the default arguments and the module loaded.
    pub fn start() -> Server {
        Server::builder().start()
    }

    /// A server as managed Redis and Valkey are: no module, and none loadable
    /// (`enable-module-command no`): the clients' script path.
    pub fn start_without_module() -> Server {
        Server::builder().managed().start()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the server was started with the module loaded.
    pub fn has_module(&self) -> bool {
        self.module
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The last lines of the server log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Where a server started from a config file reads it.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("redis.conf")
    }

    fn command_line(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        if let Some(text) = &self.config {
            if !self.config_path().exists() {
                fs::write(self.config_path(), text).expect("write the config file");
            }
            a.push(self.config_path().display().to_string());
        }
        a.extend::<[String; 16]>([
            "--port".into(),
            self.port.to_string(),
            "--bind".into(),
            self.host().into(),
            "--dir".into(),
            self.dir.display().to_string(),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            "--enable-debug-command".into(),
            "yes".into(),
            "--daemonize".into(),
            "no".into(),
            "--logfile".into(),
            self.log_path().display().to_string(),
        ]);
        if self.module {
            let path = self.module_file.clone().unwrap_or_else(module_path);
            a.push("--loadmodule".into());
            a.push(path.display().to_string());
        }
        if self.place.bind.is_some() {
            a.extend(["--protected-mode".into(), "no".into()]);
        }
        if self.cluster {
            a.extend([
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                self.dir.join("nodes.conf").display().to_string(),
            ]);
        }
        // Later arguments override earlier ones, so extras can replace the defaults above.
        a.extend(self.extra.iter().cloned());
        a
    }

    /// Spawns the child and waits for PING.
    fn spawn(&mut self) -> Result<(), Spawn> {
        let binary = self.binary.clone().unwrap_or_else(redis_server_bin);
        let mut command = match &self.place.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        let child = command
            .args(self.command_line())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Spawn::Failed(format!("cannot spawn {}: {e}", redis_server_bin())))?;
        self.child = Some(child);
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            if self.ping() {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .is_some();
            if exited || Instant::now() >= deadline {
                let log = self.log_tail();
                self.kill9();
                if exited && log.contains("Address already in use") {
                    return Err(Spawn::PortTaken(log));
                }
                return Err(Spawn::Failed(format!(
                    "redis-server on port {} {}; log tail:\n{log}",
                    self.port,
                    if exited {
                        "exited during startup"
                    } else {
                        "did not answer PING in time"
                    }
                )));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// True when the server answers PING and is this child (from inside its namespace, if any).
    fn ping(&self) -> bool {
        let url = self.url();
        let pid = self.child.as_ref().map(Child::id);
        match &self.place.netns {
            Some(ns) => crate::netns::in_ns(ns, move || ping(&url, pid))
                .join()
                .unwrap_or(false),
            None => ping(&url, pid),
        }
    }

    /// The address the server binds (127.0.0.1 unless [`Builder::bind`] said another).
    pub fn host(&self) -> &str {
        self.place.bind.as_deref().unwrap_or("127.0.0.1")
    }

    pub fn url(&self) -> String {
        format!("redis://{}:{}/", self.host(), self.port)
    }

    /// A new connection; reads time out so a hung server fails the test instead of hanging it.
    pub fn client(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).expect("client url");
        let con = client
            .get_connection_with_timeout(STARTUP_DEADLINE)
            .unwrap_or_else(|e| panic!("connect to port {}: {e}", self.port));
        con.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("set read timeout");
        con
    }

    /// Runs `redis-cli -p PORT args...` and returns its stdout exactly. Note that redis-cli
    /// prints raw replies when stdout is not a terminal; pass `--no-raw` first to get the
    /// formatting a user sees interactively.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.cli_output(args);
        String::from_utf8(out.stdout).expect("redis-cli stdout is UTF-8")
    }

    /// Like [`Server::cli`] but returns the whole process output (stdout, stderr, status).
    pub fn cli_output(&self, args: &[&str]) -> std::process::Output {
        Command::new(redis_cli_bin())
            .arg("-p")
            .arg(self.port.to_string())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", redis_cli_bin()))
    }

    /// `DEBUG DIGEST` of the whole dataset.
    pub fn digest(&self) -> String {
        redis::cmd("DEBUG")
            .arg("DIGEST")
            .query(&mut self.client())
            .expect("DEBUG DIGEST")
    }

    /// One field of `INFO section`, e.g. `info_field("replication", "master_repl_offset")`.
    pub fn info_field(&self, section: &str, name: &str) -> Option<String> {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut self.client())
            .expect("INFO");
        info.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == name).then(|| v.trim().to_string())
        })
    }

    /// Which server this is, from `INFO server`, for tests whose expectations depend on it.
    pub fn version(&self) -> Version {
        let valkey = self.info_field("server", "valkey_version");
        let text = valkey
            .clone()
            .or_else(|| self.info_field("server", "redis_version"))
            .expect("INFO server has no redis_version");
        let mut parts = text.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let major = parts.next().unwrap_or(0);
        let minor = parts.next().unwrap_or(0);
        Version {
            valkey: valkey.is_some(),
            major,
            minor,
            text,
        }
    }

    /// Kills the server with SIGKILL (no shutdown save, no AOF rewrite) and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port and directory, so it loads
    /// whatever AOF or RDB the previous run left there.
    pub fn restart(&mut self) {
        self.kill9();
        match self.spawn() {
            Ok(()) => {}
            Err(Spawn::PortTaken(log)) => panic!(
                "redis-server could not get port {} back on restart; log tail:\n{log}",
                self.port
            ),
            Err(Spawn::Failed(why)) => panic!("{why}"),
        }
    }

    /// True while the child process is alive (a crashed server is a failed test).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }
}

/// True when the server at `url` answers PING and, given `pid`, reports that process id.
fn ping(url: &str, pid: Option<u32>) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
        return false;
    };
    let _ = con.set_read_timeout(Some(Duration::from_millis(500)));
    if !matches!(
        redis::cmd("PING").query::<String>(&mut con).as_deref(),
        Ok("PONG")
    ) {
        return false;
    }
    // The port was free when probed, but another test's server may have taken it first: then
    // ours exits ("Address already in use") and the answer came from the other one.
    let Some(pid) = pid.map(|p| p.to_string()) else {
        return true;
    };
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut con)
        .unwrap_or_default();
    info.lines()
        .any(|l| l.strip_prefix("process_id:").map(str::trim) == Some(pid.as_str()))
}

/// A server's family and version (Valkey reports its own version, not the Redis one it forked).
#[derive(Debug, Clone)]
pub struct Version {
    pub valkey: bool,
    pub major: u32,
    pub minor: u32,
    /// As INFO prints it, e.g. `7.0.15`.
    pub text: String,
}

impl Version {
    /// Redis at `major.minor` or later; any Valkey counts as Redis 7.2 (its fork point) or later.
    pub fn redis_at_least(&self, major: u32, minor: u32) -> bool {
        if self.valkey && (major, minor) <= (7, 2) {
            return true;
        }
        !self.valkey && (self.major, self.minor) >= (major, minor)
    }

    /// Valkey at `major` or later.
    pub fn valkey_at_least(&self, major: u32) -> bool {
        self.valkey && self.major >= major
    }
}

/// Starts a replica of `master` (module loaded, plus `extra` arguments) and waits until its
/// link to the master is up and the initial sync is done.
pub fn start_replica(master: &Server, extra: &[&str]) -> Server {
    let replica = attach_replica(master, extra);
    wait_in_sync(master, &replica);
    replica
}

/// Starts a replica of `master` and waits only for its link to come up, so traffic may still
/// be running (`start_replica` waits for equal offsets, which needs a quiet master).
pub fn attach_replica(master: &Server, extra: &[&str]) -> Server {
    // The default 5 s diskless-sync delay would dominate the test's run time.
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "repl-diskless-sync-delay", "0"])
        .query(&mut master.client())
        .expect("CONFIG SET repl-diskless-sync-delay");
    let replica = Server::builder()
        .args(["--replicaof", "127.0.0.1"])
        .arg(master.port().to_string())
        .args(extra.iter().copied())
        .start();
    wait_link_up(&replica);
    replica
}

/// Waits until the replica's link to its master is up.
pub fn wait_link_up(replica: &Server) {
    wait_until(STARTUP_DEADLINE, "replica master_link_status:up", || {
        replica
            .info_field("replication", "master_link_status")
            .as_deref()
            == Some("up")
    });
}

/// Waits until the replica has processed everything the master has propagated so far.
pub fn wait_in_sync(master: &Server, replica: &Server) {
    let offset = |s: &Server| -> i64 {
        s.info_field("replication", "master_repl_offset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1)
    };
    let target = offset(master);
    // `>=`: the master may send its periodic PING meanwhile, moving both offsets past target.
    wait_until(
        STARTUP_DEADLINE,
        &format!("replica offset to reach master offset {target}"),
        || offset(replica) >= target,
    );
}

/// The server's clock (`TIME`) in milliseconds.
pub fn server_time_ms(con: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).expect("TIME");
    secs * 1000 + micros / 1000
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
