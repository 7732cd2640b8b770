//! Module configs (`CONFIG SET/GET slidingwindow.*`, redis.conf after `loadmodule`, `MODULE LOADEX
//! ... CONFIG`): descriptors with plain getters and setters, behind the C callbacks Redis calls.
//! Redis itself checks enum names and numeric ranges, and refuses the rest with its own error.

use super::api;
use super::command::Loader;
use redis_module::raw;
use std::ffi::{CStr, c_void};
use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr::NonNull;

/// A config taking one of a few names.
pub struct EnumConfig {
    /// Without the module prefix: `storage` is `slidingwindow.storage`.
    pub name: &'static CStr,
    pub names: &'static [&'static CStr],
    /// Index in `names` of the default.
    pub default: c_int,
    pub get: fn() -> c_int,
    pub set: fn(c_int),
}

/// A config taking an integer within a range.
pub struct NumericConfig {
    pub name: &'static CStr,
    pub default: i64,
    pub min: i64,
    pub max: i64,
    pub get: fn() -> i64,
    pub set: fn(i64),
}

extern "C" fn get_enum(_name: *const c_char, privdata: *mut c_void) -> c_int {
    // SAFETY: `privdata` is the `&'static EnumConfig` registered below.
    let config = unsafe { &*privdata.cast::<EnumConfig>() };
    (config.get)()
}

extern "C" fn set_enum(
    _name: *const c_char,
    value: c_int,
    privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: as in `get_enum`.
    let config = unsafe { &*privdata.cast::<EnumConfig>() };
    (config.set)(value);
    raw::REDISMODULE_OK as c_int
}

extern "C" fn get_numeric(_name: *const c_char, privdata: *mut c_void) -> c_longlong {
    // SAFETY: `privdata` is the `&'static NumericConfig` registered below.
    let config = unsafe { &*privdata.cast::<NumericConfig>() };
    (config.get)()
}

extern "C" fn set_numeric(
    _name: *const c_char,
    value: c_longlong,
    privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: as in `get_numeric`.
    let config = unsafe { &*privdata.cast::<NumericConfig>() };
    (config.set)(value);
    raw::REDISMODULE_OK as c_int
}

impl Loader<'_> {
    pub fn enum_config(&self, config: &'static EnumConfig) -> Result<(), String> {
        let fail = || format!("cannot register config {}", config.name.to_string_lossy());
        // SAFETY: read once at load.
        let register = unsafe { raw::RedisModule_RegisterEnumConfig }.ok_or_else(fail)?;
        let mut names: Vec<*const c_char> = config.names.iter().map(|n| n.as_ptr()).collect();
        let values: Vec<c_int> = (0..names.len())
            .map(|i| c_int::try_from(i).unwrap_or(c_int::MAX))
            .collect();
        let count = c_int::try_from(names.len()).map_err(|_| fail())?;
        // SAFETY: the load context; Redis copies the names and values; `privdata` points to a
        // static descriptor that outlives the module.
        let r = unsafe {
            register(
                self.raw(),
                config.name.as_ptr(),
                config.default,
                raw::REDISMODULE_CONFIG_DEFAULT,
                names.as_mut_ptr(),
                values.as_ptr(),
                count,
                Some(get_enum),
                Some(set_enum),
                None,
                std::ptr::from_ref(config).cast_mut().cast(),
            )
        };
        if r == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            Err(fail())
        }
    }

    pub fn numeric_config(&self, config: &'static NumericConfig) -> Result<(), String> {
        let fail = || format!("cannot register config {}", config.name.to_string_lossy());
        // SAFETY: read once at load.
        let register = unsafe { raw::RedisModule_RegisterNumericConfig }.ok_or_else(fail)?;
        // SAFETY: as in `enum_config`.
        let r = unsafe {
            register(
                self.raw(),
                config.name.as_ptr(),
                config.default,
                raw::REDISMODULE_CONFIG_DEFAULT,
                config.min,
                config.max,
                Some(get_numeric),
                Some(set_numeric),
                None,
                std::ptr::from_ref(config).cast_mut().cast(),
            )
        };
        if r == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            Err(fail())
        }
    }

    /// Sets the module's config `name` (without the prefix) to `value` through `CONFIG SET`, so
    /// that Redis checks it as it checks every other source; its error text if it refuses.
    pub fn set_config(&self, name: &str, value: &[u8]) -> Result<(), String> {
        let api = api::get().ok_or("the module API is not resolved")?;
        let full = format!("slidingwindow.{name}");
        // SAFETY: the load context (which has a client to call with); the format names a C
        // string and two buffers with their lengths, which follow.
        let reply = unsafe {
            (api.call)(
                self.raw(),
                c"CONFIG".as_ptr(),
                c"cbb".as_ptr(),
                c"SET".as_ptr(),
                full.as_ptr(),
                full.len(),
                value.as_ptr(),
                value.len(),
            )
        };
        let reply = NonNull::new(reply).ok_or("CONFIG SET could not run")?;
        // SAFETY: a live reply, freed below; an error reply's text is copied before that.
        unsafe {
            let r = reply.as_ptr();
            let refused = (api.call_reply_type)(r) == raw::REDISMODULE_REPLY_ERROR as c_int;
            let why = refused.then(|| {
                let mut len = 0usize;
                let ptr = (api.call_reply_string_ptr)(r, &mut len);
                if ptr.is_null() {
                    return String::from("refused");
                }
                String::from_utf8_lossy(std::slice::from_raw_parts(ptr.cast::<u8>(), len))
                    .into_owned()
            });
            (api.free_call_reply)(r);
            why.map_or(Ok(()), Err)
        }
    }

    /// Applies the values given in redis.conf or `MODULE LOADEX`; after every registration.
    pub fn load_configs(&self) -> Result<(), String> {
        // SAFETY: read once at load; then the load context.
        let load = unsafe { raw::RedisModule_LoadConfigs }
            .ok_or("this server has no module configs (Redis >= 7.0 has)")?;
        if unsafe { load(self.raw()) } == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            Err("a slidingwindow.* config value was refused".into())
        }
    }
}
