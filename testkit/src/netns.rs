//! Network namespaces made by `ip netns add`: a thread inside one, so that the sockets it opens
//! are that namespace's.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::thread::{self, JoinHandle};

/// Runs `f` on a thread of its own inside network namespace `ns` (sockets it opens, and threads it
/// starts, are that namespace's).
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: a valid file descriptor of a network namespace; setns changes only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}
