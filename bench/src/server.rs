//! A private redis-server with the module loaded, killed when dropped (also on panic).

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::io::tcp::TcpSettings;
use redis::{Client, Connection, IntoConnectionInfo};

use crate::Result;
use crate::variants::{Shape, Variant};
use crate::workload::Workload;

const START_DEADLINE: Duration = Duration::from_secs(10);

pub struct Server {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Server {
    pub fn start(module: &Path) -> Result<Server> {
        let dir = fresh_dir()?;
        let port = free_port()?;
        let log = File::create(dir.join("redis.log"))?;
        let child = Command::new(redis_binary())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--loadmodule")
            .arg(module)
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("cannot start redis-server: {e}"))?;
        let mut server = Server { child, port, dir };
        server.wait_ready()?;
        Ok(server)
    }

    /// A connection with TCP_NODELAY, so depth-1 round trips are not held back by Nagle.
    pub fn connect(&self) -> Result<Connection> {
        self.connect_db(0)
    }

    /// As `connect`, on database `db`.
    pub fn connect_db(&self, db: usize) -> Result<Connection> {
        let info = format!("redis://127.0.0.1:{}/{db}", self.port)
            .into_connection_info()?
            .set_tcp_settings(TcpSettings::default().set_nodelay(true));
        Ok(Client::open(info)?.get_connection()?)
    }

    /// Polls PING until it answers; fails early with the server's log if the process exits
    /// (e.g. the module does not load).
    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("redis-server exited ({status}):\n{}", self.log()).into());
            }
            if self.ping().is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server did not answer PING:\n{}", self.log()).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server knows `command` (`COMMAND INFO` answers nil for an unknown one).
    pub fn has_command(&self, command: &str) -> Result<bool> {
        let mut con = self.connect()?;
        let info: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(command)
            .query(&mut con)?;
        Ok(matches!(info.first(), Some(redis::Value::Array(_))))
    }

    fn ping(&self) -> Result<()> {
        let mut con = self.connect()?;
        redis::cmd("PING").query::<String>(&mut con)?;
        Ok(())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
}

/// The module's server, and redis-cell's when it could be built and loaded.
pub struct Servers {
    pub main: Server,
    pub cell: Option<Server>,
    /// Whether the module has SLIDINGWINDOW.ALLOWALL (the `tenant` workload's one call).
    pub allowall: bool,
    /// Whether the module has SLIDINGWINDOW.REFUND.
    pub refund: bool,
}

impl Servers {
    pub fn new(main: Server, cell: Option<Server>) -> Result<Servers> {
        let allowall = main.has_command("slidingwindow.allowall")?;
        let refund = main.has_command("slidingwindow.refund")?;
        Ok(Servers {
            main,
            cell,
            allowall,
            refund,
        })
    }

    /// Whether `variant` runs `workload` here: it serves it, its server runs, and the module
    /// has the commands it sends.
    pub fn runs(&self, variant: &Variant, workload: &Workload) -> bool {
        let lacks_allowall =
            workload.has_tenant() && variant.shape == Shape::Allow && !self.allowall;
        variant.shape.serves(workload) && self.for_variant(variant).is_some() && !lacks_allowall
    }

    /// The server `variant` runs on; None when that is redis-cell's and it is unavailable.
    pub fn for_variant(&self, variant: &Variant) -> Option<&Server> {
        if variant.shape.on_cell_server() {
            self.cell.as_ref()
        } else {
            Some(&self.main)
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn redis_binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

/// The OS picks a free loopback port; released just before redis-server binds it.
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn fresh_dir() -> Result<PathBuf> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "slidingwindow-bench-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
