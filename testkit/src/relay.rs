//! A TCP relay that delays: what either side of a connection sends reaches the other side
//! `delay` later, chunk by chunk, in order. A far server for tests on one host (the Rust
//! client's far lease) and, inside a network namespace, the gateway's regions test's link where
//! the kernel has no `sch_netem`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// A running relay. Dropping it stops accepting and shuts down the connections it relays.
pub struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accepting: Option<JoinHandle<()>>,
}

impl Relay {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://` and its address.
    pub fn redis_url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accepting.take() {
            let _ = t.join();
        }
    }
}

/// A relay on a free port of 127.0.0.1 to `to`, `delay` each way.
pub fn start(to: SocketAddr, delay: Duration) -> Relay {
    start_on(IpAddr::V4(Ipv4Addr::LOCALHOST), to, delay)
}

/// A relay on a free port of `ip` to `to`, `delay` each way. Its sockets and threads are in the
/// calling thread's network namespace.
pub fn start_on(ip: IpAddr, to: SocketAddr, delay: Duration) -> Relay {
    let listener = TcpListener::bind((ip, 0)).expect("the relay's port");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("its address");
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let accepting = thread::spawn(move || {
        let mut open = Vec::new();
        while !stopped.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((near, _)) => {
                    let _ = near.set_nonblocking(false);
                    let Ok(far) = TcpStream::connect(to) else {
                        continue;
                    };
                    for s in [&near, &far] {
                        let _ = s.set_nodelay(true);
                    }
                    let (Ok(near2), Ok(far2)) = (near.try_clone(), far.try_clone()) else {
                        continue;
                    };
                    open.extend(near.try_clone().ok());
                    open.extend(far.try_clone().ok());
                    pipe(near, far, delay);
                    pipe(far2, near2, delay);
                }
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
        for s in open {
            let _ = s.shutdown(Shutdown::Both);
        }
    });
    Relay {
        addr,
        stop,
        accepting: Some(accepting),
    }
}

/// What `from` sends goes to `to` `delay` later, in order; `to`'s sending side shuts when `from`
/// ends.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            if tx
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    });
    thread::spawn(move || {
        for (due, chunk) in rx {
            thread::sleep(due.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
