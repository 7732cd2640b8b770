//! `--admission-log PATH`: one line per admitted request, `<ms> <key>`, written as it is
//! admitted, before it goes on. Each line is one write(2) to a file opened for appending: a
//! gateway killed with SIGKILL leaves every line of what it admitted in the kernel's hands.

use slidingwindow_client::ErrorLog;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

pub struct AdmissionLog {
    file: File,
    log: ErrorLog,
}

impl AdmissionLog {
    pub fn open(path: &Path) -> std::io::Result<AdmissionLog> {
        Ok(AdmissionLog {
            file: OpenOptions::new().create(true).append(true).open(path)?,
            log: ErrorLog::new("gateway", "the admission log"),
        })
    }

    /// `at_ms`: the time the request was admitted at on the gateway's clock (the `now` its
    /// calls passed, or the lease's handout time); `key`: its first key.
    pub fn admitted(&self, at_ms: u64, key: &[u8]) {
        let mut line = Vec::with_capacity(key.len() + 22);
        // Writing to a Vec cannot fail.
        let _ = write!(line, "{at_ms} ");
        line.extend_from_slice(key);
        line.push(b'\n');
        match (&self.file).write_all(&line) {
            Ok(()) => self.log.succeeded(),
            Err(e) => self.log.failed("going on without it", &e),
        }
    }
}
