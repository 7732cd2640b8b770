//! The pure logic, free of Redis, is the crate `slidingwindow-core` (folder `core/`); its modules
//! are re-exported here so the module names them `crate::core::...`.

pub use slidingwindow_core::*;
// The shared seeded generator (dev-only crate `testkit`), for unit tests.
#[cfg(test)]
pub use testkit::rng;

/// The window decision, with the shared contract model beside it for the storages' unit tests.
pub mod window {
    pub use slidingwindow_core::window::*;
    #[cfg(test)]
    pub use testkit::model;
}
