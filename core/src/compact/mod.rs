//! The compact storage's log, free of Redis: the timestamps of logged requests in bit-packed
//! words, small buffers and sorted blocks under an order-statistic B-tree (`log`), its RDB encoding
//! (`codec`), the change `SLIDINGWINDOW.APPLY` carries (`change`) and the heap it owns, as the
//! allocator and the defragmenter see it (`heap`). The module's
//! `store::compact` wraps it in the data type `swcompact`.

mod bits;
mod block;
pub mod change;
pub mod codec;
pub mod heap;
mod index;
pub mod log;
mod small;
