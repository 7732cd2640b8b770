//! slidingwindow: `SLIDINGWINDOW.ALLOW` and `SLIDINGWINDOW.PEEK`, a sliding-window-log rate limiter
//! kept in an ordinary sorted set, decided in one native atomic step.
//!
//! Pure logic (`args`, `window`, `reply`, `member`, `error`) knows nothing of Redis; `redis` is the glue.

pub mod args;
pub mod error;
pub mod member;
mod redis;
pub mod reply;
pub mod window;

use redis_module::{Context, RedisString, Status, redis_module};

// Unit tests run outside Redis, where the Redis allocator does not exist.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;
#[cfg(test)]
const ALLOCATOR: Allocator = std::alloc::System;

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    match redis::register(ctx.ctx) {
        Ok(()) => Status::Ok,
        Err(why) => {
            ctx.log_warning(&format!("slidingwindow: {why}"));
            Status::Err
        }
    }
}

redis_module! {
    name: "slidingwindow",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [],
    init: init,
}
