//! slidingwindow: `SLIDINGWINDOW.ALLOW` and `SLIDINGWINDOW.PEEK`, a sliding-window-log rate limiter
//! decided in one native atomic step.
//!
//! `core` is the pure logic (no Redis), `store` the storages behind its `Log` trait, `cmd` the
//! commands, `ffi` every unsafe line. This file only registers them.
#![deny(unsafe_code)]

mod cmd;
pub mod core;
mod ffi;
mod store;

use redis_module::{Context, RedisString, Status};

// Unit tests run outside Redis, where the Redis allocator does not exist.
#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: redis_module::alloc::RedisAlloc = redis_module::alloc::RedisAlloc;

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    match ffi::Loader::new(ctx).and_then(|loader| cmd::register(&loader)) {
        Ok(()) => Status::Ok,
        Err(why) => {
            ctx.log_warning(&format!("slidingwindow: {why}"));
            Status::Err
        }
    }
}

entry_point!(c"slidingwindow", 1, init);
