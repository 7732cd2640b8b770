//! Test-only code shared by the module's unit tests, the integration tests, the fuzz targets and
//! the bench: one contract model and one seeded generator, so `src/` never reaches into `tests/`;
//! with the feature `server`, the one harness that starts `redis-server`s for the module's
//! integration tests, the Rust client's and the services' tests.

/// The DUMP payload's format: lengths, varints, the checksum, a compact log's timestamps.
pub mod dump;
pub mod model;
pub mod rng;
pub mod spec;
pub mod spec_headers;
pub mod spec_leases;
pub mod zipf;

/// The integration tests' commands and readers: the five-field reply, pipelines, events.
#[cfg(feature = "server")]
pub mod client;
/// A cluster of servers, its slots and its views.
#[cfg(feature = "server")]
pub mod cluster;
/// A real `redis-server` per test with the module loaded: start, call, poll, replicas.
#[cfg(feature = "server")]
pub mod harness;
/// A thread inside a network namespace, for servers started in one.
#[cfg(feature = "server")]
pub mod netns;
/// The module's INFO counters and the most requests in a window, as the client's and the
/// services' tests read them.
#[cfg(feature = "server")]
pub mod probe;
/// A TCP relay that holds each chunk a delay each way: a far server on one host.
#[cfg(feature = "server")]
pub mod relay;
/// Concurrent traffic against a server, checked against the contract model.
#[cfg(feature = "server")]
pub mod traffic;
/// A server under valgrind, and its log's readers.
#[cfg(feature = "server")]
pub mod valgrind;
