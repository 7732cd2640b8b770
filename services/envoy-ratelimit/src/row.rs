//! One descriptor's verdict, as the response and its headers read it.

use crate::config::Limit;

/// One descriptor's verdict, before it becomes a DescriptorStatus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<'a> {
    /// OVER_LIMIT (never for shadow mode).
    pub over: bool,
    pub limit: Option<&'a Limit>,
    /// Counts against the request (not shadow, not a refund).
    pub enforced: bool,
    pub remaining: u32,
    /// `duration_until_reset` in ms: while a request of this cost would be refused, the wait
    /// until it would fit; otherwise (it fits, or never can) the wait until the window is empty.
    pub duration_ms: Option<i64>,
    pub reset_ms: i64,
}
