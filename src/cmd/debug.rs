//! Test builds only (`panic-test`): `SLIDINGWINDOW.DEBUGPANIC` panics on purpose, or with
//! `ARM AFTER-TRIM|AFTER-ADD` arms a panic inside the next ALLOW, to prove panics are contained.

use super::{Answer, run};
use crate::core::error::Error;
use crate::core::fault::{self, Point};
use crate::ffi::{Access, Argv, Ctx, Handler, Spec, handler};
use crate::store::Changes;

struct DebugPanic;
impl Handler for DebugPanic {
    fn call<'a>(ctx: Ctx<'a>, argv: Argv<'a>) {
        run(ctx, argv, body, None);
    }
}

fn body<'a>(_ctx: Ctx<'a>, argv: Argv<'a>, _fx: &mut Changes<'a>) -> Result<Answer, Error> {
    if argv.bytes(1).eq_ignore_ascii_case(b"ARM") {
        let point = argv.bytes(2);
        if point.eq_ignore_ascii_case(b"AFTER-TRIM") {
            fault::arm(Point::AfterTrim);
        } else if point.eq_ignore_ascii_case(b"AFTER-ADD") {
            fault::arm(Point::AfterAdd);
        } else {
            return Err(Error::UnknownOption(crate::core::error::token(point)));
        }
        return Ok(Answer::Integer(1));
    }
    std::panic::panic_any("slidingwindow.debugpanic: a deliberate panic")
}

pub fn spec() -> Spec {
    Spec {
        name: c"slidingwindow.debugpanic",
        handler: handler::<DebugPanic>(),
        flags: c"readonly",
        access: Access::Read,
        keys: crate::ffi::Keys::One,
        summary: c"Panics on purpose (test builds only)",
        complexity: c"O(1)",
        arity: -1,
        args: &[],
        acl: c"slow",
    }
}
