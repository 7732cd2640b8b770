//! `SLIDINGWINDOW.REFUND key n [AT ts]`: takes back up to `n` logged requests, the newest at or
//! before `ts`. No trim, the TTL untouched.

use super::Answer;
use super::request::{resolve, words};
use crate::core::args::parse_refund;
use crate::core::error::Error;
use crate::ffi::{Argv, Ctx, Key, Kind, Mode};
use crate::store::compact::CompactStore;
use crate::store::compact::log::CompactLog;
use crate::store::zset::ZsetLog;
use crate::store::{Effects, Store};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Effects<'a>) -> Result<Answer, Error> {
    let args = words(argv, parse_refund)?;
    let through = args.at.map(|at| resolve(ctx, at));
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = Key::open(ctx, name, Mode::Write)?;
    let removed = match key.kind::<CompactLog>() {
        Kind::Empty => 0,
        Kind::Zset => ZsetLog::new(&mut key, &mut fx.zset).refund(through, args.n)?,
        Kind::Native => CompactStore::new(&mut key, &mut fx.compact).refund(through, args.n)?,
        Kind::Other => return Err(Error::WrongType),
    };
    super::stats::refund(removed);
    Ok(Answer::count(removed))
}
