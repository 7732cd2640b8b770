//! The compact storage's log, free of Redis: the timestamps of logged requests in bit-packed
//! words, small buffers and sorted blocks under an order-statistic B-tree (`log`), its RDB encoding
//! (`codec`) and the change `SLIDINGWINDOW.APPLY` carries (`change`). The module's
//! `store::compact` wraps it in the data type `swcompact`.

mod bits;
mod block;
pub mod change;
pub mod codec;
mod index;
pub mod log;
mod small;
