//! Test-only code shared by the module's unit tests, the integration tests, the fuzz targets and
//! the bench: one contract model and one seeded generator, so `src/` never reaches into `tests/`.

pub mod model;
pub mod rng;
pub mod spec;
