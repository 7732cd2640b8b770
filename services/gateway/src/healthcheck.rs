//! `http-gateway healthcheck`: GET a running gateway's --health-path, for images with no shell
//! or curl (a `HEALTHCHECK`). Exit status 0 on `200`, 1 otherwise, with a line on stderr saying
//! what it found.

use crate::config::health_path;
use clap::Parser;
use slidingwindow_service::duration::parse_duration;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

/// Asks the gateway at --listen for --health-path; both default to the gateway's own flags'
/// variables (GATEWAY_LISTEN, GATEWAY_HEALTH_PATH). An unspecified host such as 0.0.0.0 is
/// asked on loopback.
#[derive(Debug, Parser)]
#[command(
    name = "http-gateway healthcheck",
    bin_name = "http-gateway healthcheck"
)]
pub struct Args {
    /// The gateway's address.
    #[arg(long, env = "GATEWAY_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The gateway's --health-path.
    #[arg(long, value_name = "PATH", env = "GATEWAY_HEALTH_PATH", value_parser = health_path)]
    pub health_path: String,
    /// How long the connection and the answer may take.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub timeout: Duration,
}

pub fn run(args: Args) -> ExitCode {
    let addr = slidingwindow_service::dialable(args.listen);
    match status_line(addr, &args.health_path, args.timeout) {
        Ok(line) if line.split(' ').nth(1) == Some("200") => ExitCode::SUCCESS,
        Ok(line) => {
            eprintln!(
                "http-gateway healthcheck: GET http://{addr}{}: {line}",
                args.health_path
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!(
                "http-gateway healthcheck: GET http://{addr}{}: {e}",
                args.health_path
            );
            ExitCode::FAILURE
        }
    }
}

/// The status line of an HTTP/1.0 GET (the server closes the connection after answering).
fn status_line(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<String> {
    let mut tcp = TcpStream::connect_timeout(&addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    write!(tcp, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut reply = Vec::new();
    tcp.take(4096).read_to_end(&mut reply)?;
    let text = String::from_utf8_lossy(&reply);
    Ok(text.lines().next().unwrap_or("no answer").to_owned())
}
