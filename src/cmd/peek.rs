//! `SLIDINGWINDOW.PEEK key window max now [COST n]`: ALLOW's answer, changing nothing.

use super::Answer;
use super::request::request;
use crate::core::error::Error;
use crate::core::window;
use crate::ffi::{Argv, Ctx, Key, Kind, Mode};
use crate::store::Effects;
use crate::store::compact::CompactStore;
use crate::store::compact::log::CompactLog;
use crate::store::zset::ZsetLog;

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Effects<'a>) -> Result<Answer, Error> {
    let req = request(ctx, argv)?;
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = Key::open(ctx, name, Mode::Read)?;
    // The logs only read; `fx` stays empty, so nothing is propagated.
    let reply = match key.kind::<CompactLog>() {
        Kind::Empty | Kind::Zset => window::peek(&mut ZsetLog::new(&mut key, &mut fx.zset), &req)?,
        Kind::Native => window::peek(&mut CompactStore::new(&mut key, &mut fx.compact), &req)?,
        Kind::Other => return Err(Error::WrongType),
    };
    Ok(Answer::Fields(reply))
}
