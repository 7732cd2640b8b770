//! The pure logic of the slidingwindow Redis module, free of Redis: argument parsing, the window
//! decision over the `Log` trait, the compact storage's log (`compact`), the reply's fields, member names, errors and the limits
//! (`MAX_*`). The module, its fuzz targets and the Rust client build on it. Unit-tested with
//! tables of cases.

pub mod args;
pub mod compact;
pub mod error;
#[cfg(feature = "panic-test")]
pub mod fault;
pub mod limits;
pub mod member;
pub mod reply;
pub mod top;
// The shared seeded generator (dev-only crate `testkit`), for unit tests.
#[cfg(test)]
pub use testkit::rng;
pub mod version;
pub mod window;
