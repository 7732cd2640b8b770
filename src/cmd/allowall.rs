//! `SLIDINGWINDOW.ALLOWALL numkeys key [key ...] now [COST n] LIMIT keyno window max... [LEASE ms]
//! [PRECISION p] [DETAIL]`: one request against the limits of several keys, all or nothing.

use super::Answer;
use super::request::{open_keys, request};
use crate::core::args;
use crate::core::error::Error;
use crate::core::limits::Scope;
use crate::core::window;
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::{self, Changes, Store};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Changes<'a>) -> Result<Answer, Error> {
    let req = request(ctx, argv, args::parse_all)?;
    let n = req.limits.keys();
    // Every key is opened, its type checked, before any key changes.
    let mut keys = open_keys(ctx, argv, n, Mode::Write)?;
    let storage = store::default_storage();
    let mut logs: Vec<_> = keys
        .iter_mut()
        .zip(fx.keys(n))
        .map(|(key, fx)| key.log(fx, storage))
        .collect();
    let outcome = window::allow_all(&mut logs, &req)?;
    if outcome.reply.allowed {
        // Each key lives at least as long as its own longest window (and how far ahead of `now`
        // its members are scored, and the lateness), from the server's clock.
        for (k, log) in logs.iter_mut().enumerate() {
            log.set_expiry(req.expire_at(k))?;
        }
    }
    super::stats::allow(req.cost, &outcome);
    if !outcome.reply.allowed {
        // The key of the binding limit.
        let binding = outcome.reply.binding.unwrap_or(0);
        if let Some((key, _)) = req.limits.iter().nth(binding) {
            super::top::refused(argv.bytes(key + 2));
        }
    }
    Ok(Answer::of(outcome))
}
