//! The bench's servers on testkit's harness: a redis-server with the module at a given path (the
//! build under test, an A/B build, redis-cell's), killed when dropped (also on panic), and
//! connections without Nagle's delay.

use std::path::Path;

use redis::io::tcp::TcpSettings;
use redis::{Client, Connection, IntoConnectionInfo};
use testkit::harness;

use crate::Result;
use crate::variants::{Shape, Variant};
use crate::workload::Workload;

pub struct Server(harness::Server);

impl Server {
    pub fn start(module: &Path) -> Result<Server> {
        Ok(Server(
            harness::Server::builder().module(module).try_start()?,
        ))
    }

    /// A connection with TCP_NODELAY, so depth-1 round trips are not held back by Nagle.
    pub fn connect(&self) -> Result<Connection> {
        self.connect_db(0)
    }

    /// As `connect`, on database `db`.
    pub fn connect_db(&self, db: usize) -> Result<Connection> {
        let info = format!("redis://127.0.0.1:{}/{db}", self.0.port())
            .into_connection_info()?
            .set_tcp_settings(TcpSettings::default().set_nodelay(true));
        Ok(Client::open(info)?.get_connection()?)
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
