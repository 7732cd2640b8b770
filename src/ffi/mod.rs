//! Every `unsafe` line of the module: small safe wrappers over the raw module API, with RAII
//! guards (keys closed, strings and call replies freed, ranges stopped on drop). Handles carry the
//! lifetime of the command call that made them, so none can outlive it.
#![allow(unsafe_code)]

mod acl;
mod api;
mod call;
mod command;
mod config;
mod context;
mod datatype;
mod info;
mod key;
mod module;
mod string;

pub use command::{Access, Arg, Handler, Keys, Loader, Spec, counted_handler, handler};
pub use config::{EnumConfig, NumericConfig};
pub use context::{Class, Ctx};
pub use datatype::{AofOut, Defrag, Digest, Gauge, NativeType, RdbIn, RdbOut, TypeSlot};
pub use info::{Report, Section};
pub use key::{Key, Kind, Mode, Range};
pub use module::on_load;
pub use string::{Argv, OwnedString, RString};
