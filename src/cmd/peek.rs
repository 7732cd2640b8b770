//! `SLIDINGWINDOW.PEEK key window max now [COST n]`: ALLOW's answer, changing nothing.

use super::Answer;
use super::request::request;
use crate::core::error::Error;
use crate::core::window;
use crate::ffi::{Argv, Ctx, Key, Kind, Mode};
use crate::store::Effects;
use crate::store::zset::ZsetLog;

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Effects<'a>) -> Result<Answer, Error> {
    let req = request(ctx, argv)?;
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = Key::open(ctx, name, Mode::Read)?;
    // The log only reads; `fx` stays empty, so nothing is propagated.
    let reply = match key.kind() {
        Kind::Empty | Kind::Zset => window::peek(&mut ZsetLog::new(&mut key, &mut fx.zset), &req)?,
        Kind::Other => return Err(Error::WrongType),
    };
    Ok(Answer::Fields(reply))
}
