//! The pure logic, free of Redis: argument parsing, the window decision over the `Log` trait,
//! the reply's fields, member names and errors. Unit-tested with tables of cases.

pub mod args;
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
