//! The module's `INFO` section: `RedisModule_RegisterInfoFunc`, and a safe handle on the section
//! being written.

use super::api;
use super::command::Loader;
use redis_module::raw;
use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::ptr::NonNull;

/// Writes the module's fields when a client asks for them.
pub trait Report {
    fn report(section: &Section<'_>);
}

/// The module's section of one `INFO` reply, alive for the length of the callback.
pub struct Section<'a> {
    raw: NonNull<raw::RedisModuleInfoCtx>,
    api: &'static api::Api,
    _call: PhantomData<&'a mut raw::RedisModuleInfoCtx>,
}

impl Section<'_> {
    /// A number field; Redis prefixes the name with the module's (`slidingwindow_<name>`).
    pub fn uint(&self, name: &CStr, value: u64) {
        // SAFETY: the callback's live info context and a NUL-terminated name Redis copies.
        unsafe { (self.api.info_add_field_ulonglong)(self.raw.as_ptr(), name.as_ptr(), value) };
    }

    /// A text field (a text holding a NUL is left out: it cannot be a field).
    pub fn text(&self, name: &CStr, value: &str) {
        let Ok(value) = CString::new(value) else {
            return;
        };
        // SAFETY: as in `uint`; Redis copies the value too.
        unsafe {
            (self.api.info_add_field_cstring)(self.raw.as_ptr(), name.as_ptr(), value.as_ptr())
        };
    }
}

/// The C callback Redis invokes for `INFO`; the same fields go into a crash report.
extern "C" fn info_callback<R: Report>(ctx: *mut raw::RedisModuleInfoCtx, _for_crash: c_int) {
    let (Some(raw), Some(api)) = (NonNull::new(ctx), api::get()) else {
        return;
    };
    // The default section (null name) is named after the module: `INFO slidingwindow`. Redis
    // answers an error when the client did not ask for it, and then takes no fields.
    // SAFETY: the live info context.
    if unsafe { (api.info_add_section)(raw.as_ptr(), std::ptr::null()) }
        != raw::REDISMODULE_OK as c_int
    {
        return;
    }
    R::report(&Section {
        raw,
        api,
        _call: PhantomData,
    });
}

impl Loader<'_> {
    /// Makes `R` the module's INFO function.
    pub fn info_func<R: Report>(&self) -> Result<(), String> {
        // SAFETY: read once at load.
        let register = unsafe { raw::RedisModule_RegisterInfoFunc }
            .ok_or("this server lacks RedisModule_RegisterInfoFunc")?;
        // SAFETY: the load context and a callback that lives as long as the module.
        if unsafe { register(self.raw(), Some(info_callback::<R>)) } == raw::REDISMODULE_OK as c_int
        {
            Ok(())
        } else {
            Err("RedisModule_RegisterInfoFunc failed".into())
        }
    }
}
