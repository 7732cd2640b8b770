//! Module configs (`CONFIG SET/GET slidingwindow.*`, redis.conf after `loadmodule`, `MODULE LOADEX
//! ... CONFIG`): descriptors with plain getters and setters, behind the C callbacks Redis calls.
//! Redis itself checks enum names and numeric ranges, and refuses the rest with its own error.

use super::command::Loader;
use redis_module::raw;
use std::ffi::{CStr, c_void};
use std::os::raw::{c_char, c_int, c_longlong};

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
