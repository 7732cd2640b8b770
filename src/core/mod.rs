//! The pure logic, free of Redis: argument parsing, the window decision over the `Log` trait,
//! the reply's fields, member names and errors. Unit-tested with tables of cases.

pub mod args;
pub mod error;
#[cfg(feature = "panic-test")]
pub mod fault;
pub mod limits;
pub mod member;
pub mod reply;
// The integration tests' seeded generator, for unit tests too.
#[cfg(test)]
#[path = "../../tests/support/rng.rs"]
pub mod rng;
pub mod version;
pub mod window;
