//! The module API functions the commands call, resolved once at load: a call never checks a
//! function pointer again, and a server lacking one refuses to load the module instead.

use redis_module::raw::{
    RedisModuleCallReply, RedisModuleCtx, RedisModuleDigest, RedisModuleIO, RedisModuleInfoCtx,
    RedisModuleKey, RedisModuleString, RedisModuleType, RedisModuleUser, mstime_t,
};
use std::os::raw::{c_char, c_int, c_long, c_longlong, c_ulonglong, c_void};
use std::sync::OnceLock;

macro_rules! table {
    ($($field:ident = $name:ident: $ty:ty;)*) => {
        /// Function pointers of the running server, all present.
        pub struct Api {
            $(pub $field: $ty,)*
        }

        impl Api {
            /// Reads every pointer Redis filled in at load; names the ones this server lacks.
            fn resolve() -> Result<Api, Vec<&'static str>> {
                // SAFETY: the pointers are written once by the module's load before this runs.
                let ($($field,)*) = unsafe { ($(redis_module::raw::$name,)*) };
                match ($($field,)*) {
                    ($(Some($field),)*) => Ok(Api { $($field,)* }),
                    _ => {
                        let mut missing = Vec::new();
                        $(if $field.is_none() { missing.push(stringify!($name)); })*
                        Err(missing)
                    }
                }
            }
        }
    };
}

table! {
    milliseconds = RedisModule_Milliseconds: unsafe extern "C" fn() -> mstime_t;
    reply_array = RedisModule_ReplyWithArray: unsafe extern "C" fn(*mut RedisModuleCtx, c_long) -> c_int;
    reply_long_long = RedisModule_ReplyWithLongLong: unsafe extern "C" fn(*mut RedisModuleCtx, c_longlong) -> c_int;
    reply_simple_string = RedisModule_ReplyWithSimpleString: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char) -> c_int;
    reply_string_buffer = RedisModule_ReplyWithStringBuffer: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char, usize) -> c_int;
    get_current_user_name = RedisModule_GetCurrentUserName: unsafe extern "C" fn(*mut RedisModuleCtx) -> *mut RedisModuleString;
    get_module_user_from_user_name = RedisModule_GetModuleUserFromUserName: unsafe extern "C" fn(*mut RedisModuleString) -> *mut RedisModuleUser;
    acl_check_key_permissions = RedisModule_ACLCheckKeyPermissions: unsafe extern "C" fn(*mut RedisModuleUser, *mut RedisModuleString, c_int) -> c_int;
    free_module_user = RedisModule_FreeModuleUser: unsafe extern "C" fn(*mut RedisModuleUser);
    reply_error = RedisModule_ReplyWithError: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char) -> c_int;
    open_key = RedisModule_OpenKey: unsafe extern "C" fn(*mut RedisModuleCtx, *mut RedisModuleString, c_int) -> *mut RedisModuleKey;
    close_key = RedisModule_CloseKey: unsafe extern "C" fn(*mut RedisModuleKey);
    key_type = RedisModule_KeyType: unsafe extern "C" fn(*mut RedisModuleKey) -> c_int;
    value_length = RedisModule_ValueLength: unsafe extern "C" fn(*mut RedisModuleKey) -> usize;
    unlink_key = RedisModule_UnlinkKey: unsafe extern "C" fn(*mut RedisModuleKey) -> c_int;
    get_abs_expire = RedisModule_GetAbsExpire: unsafe extern "C" fn(*mut RedisModuleKey) -> mstime_t;
    set_abs_expire = RedisModule_SetAbsExpire: unsafe extern "C" fn(*mut RedisModuleKey, mstime_t) -> c_int;
    get_lru = RedisModule_GetLRU: unsafe extern "C" fn(*mut RedisModuleKey, *mut mstime_t) -> c_int;
    set_lru = RedisModule_SetLRU: unsafe extern "C" fn(*mut RedisModuleKey, mstime_t) -> c_int;
    get_lfu = RedisModule_GetLFU: unsafe extern "C" fn(*mut RedisModuleKey, *mut c_longlong) -> c_int;
    set_lfu = RedisModule_SetLFU: unsafe extern "C" fn(*mut RedisModuleKey, c_longlong) -> c_int;
    zset_add = RedisModule_ZsetAdd: unsafe extern "C" fn(*mut RedisModuleKey, f64, *mut RedisModuleString, *mut c_int) -> c_int;
    zset_rem = RedisModule_ZsetRem: unsafe extern "C" fn(*mut RedisModuleKey, *mut RedisModuleString, *mut c_int) -> c_int;
    zset_first_in_score_range = RedisModule_ZsetFirstInScoreRange: unsafe extern "C" fn(*mut RedisModuleKey, f64, f64, c_int, c_int) -> c_int;
    zset_last_in_score_range = RedisModule_ZsetLastInScoreRange: unsafe extern "C" fn(*mut RedisModuleKey, f64, f64, c_int, c_int) -> c_int;
    zset_range_current_element = RedisModule_ZsetRangeCurrentElement: unsafe extern "C" fn(*mut RedisModuleKey, *mut f64) -> *mut RedisModuleString;
    zset_range_next = RedisModule_ZsetRangeNext: unsafe extern "C" fn(*mut RedisModuleKey) -> c_int;
    zset_range_prev = RedisModule_ZsetRangePrev: unsafe extern "C" fn(*mut RedisModuleKey) -> c_int;
    zset_range_stop = RedisModule_ZsetRangeStop: unsafe extern "C" fn(*mut RedisModuleKey);
    zset_range_end_reached = RedisModule_ZsetRangeEndReached: unsafe extern "C" fn(*mut RedisModuleKey) -> c_int;
    create_string = RedisModule_CreateString: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char, usize) -> *mut RedisModuleString;
    free_string = RedisModule_FreeString: unsafe extern "C" fn(*mut RedisModuleCtx, *mut RedisModuleString);
    string_ptr_len = RedisModule_StringPtrLen: unsafe extern "C" fn(*const RedisModuleString, *mut usize) -> *const c_char;
    replicate_verbatim = RedisModule_ReplicateVerbatim: unsafe extern "C" fn(*mut RedisModuleCtx) -> c_int;
    replicate = RedisModule_Replicate: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char, *const c_char, ...) -> c_int;
    notify_keyspace_event = RedisModule_NotifyKeyspaceEvent: unsafe extern "C" fn(*mut RedisModuleCtx, c_int, *const c_char, *mut RedisModuleString) -> c_int;
    signal_modified_key = RedisModule_SignalModifiedKey: unsafe extern "C" fn(*mut RedisModuleCtx, *mut RedisModuleString) -> c_int;
    call = RedisModule_Call: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char, *const c_char, ...) -> *mut RedisModuleCallReply;
    call_reply_type = RedisModule_CallReplyType: unsafe extern "C" fn(*mut RedisModuleCallReply) -> c_int;
    call_reply_integer = RedisModule_CallReplyInteger: unsafe extern "C" fn(*mut RedisModuleCallReply) -> c_longlong;
    call_reply_length = RedisModule_CallReplyLength: unsafe extern "C" fn(*mut RedisModuleCallReply) -> usize;
    call_reply_array_element = RedisModule_CallReplyArrayElement: unsafe extern "C" fn(*mut RedisModuleCallReply, usize) -> *mut RedisModuleCallReply;
    call_reply_string_ptr = RedisModule_CallReplyStringPtr: unsafe extern "C" fn(*mut RedisModuleCallReply, *mut usize) -> *const c_char;
    free_call_reply = RedisModule_FreeCallReply: unsafe extern "C" fn(*mut RedisModuleCallReply);
    module_type_set_value = RedisModule_ModuleTypeSetValue: unsafe extern "C" fn(*mut RedisModuleKey, *mut RedisModuleType, *mut c_void) -> c_int;
    module_type_get_type = RedisModule_ModuleTypeGetType: unsafe extern "C" fn(*mut RedisModuleKey) -> *mut RedisModuleType;
    module_type_get_value = RedisModule_ModuleTypeGetValue: unsafe extern "C" fn(*mut RedisModuleKey) -> *mut c_void;
    module_type_replace_value = RedisModule_ModuleTypeReplaceValue: unsafe extern "C" fn(*mut RedisModuleKey, *mut RedisModuleType, *mut c_void, *mut *mut c_void) -> c_int;
    save_unsigned = RedisModule_SaveUnsigned: unsafe extern "C" fn(*mut RedisModuleIO, u64);
    load_unsigned = RedisModule_LoadUnsigned: unsafe extern "C" fn(*mut RedisModuleIO) -> u64;
    save_string_buffer = RedisModule_SaveStringBuffer: unsafe extern "C" fn(*mut RedisModuleIO, *const c_char, usize);
    load_string_buffer = RedisModule_LoadStringBuffer: unsafe extern "C" fn(*mut RedisModuleIO, *mut usize) -> *mut c_char;
    is_io_error = RedisModule_IsIOError: unsafe extern "C" fn(*mut RedisModuleIO) -> c_int;
    emit_aof = RedisModule_EmitAOF: unsafe extern "C" fn(*mut RedisModuleIO, *const c_char, *const c_char, ...);
    log = RedisModule_Log: unsafe extern "C" fn(*mut RedisModuleCtx, *const c_char, *const c_char, ...);
    log_io_error = RedisModule_LogIOError: unsafe extern "C" fn(*mut RedisModuleIO, *const c_char, *const c_char, ...);
    digest_add_long_long = RedisModule_DigestAddLongLong: unsafe extern "C" fn(*mut RedisModuleDigest, c_longlong);
    digest_end_sequence = RedisModule_DigestEndSequence: unsafe extern "C" fn(*mut RedisModuleDigest);
    free = RedisModule_Free: unsafe extern "C" fn(*mut c_void);
    malloc_size = RedisModule_MallocSize: unsafe extern "C" fn(*mut c_void) -> usize;
    info_add_section = RedisModule_InfoAddSection: unsafe extern "C" fn(*mut RedisModuleInfoCtx, *const c_char) -> c_int;
    info_add_field_ulonglong = RedisModule_InfoAddFieldULongLong: unsafe extern "C" fn(*mut RedisModuleInfoCtx, *const c_char, c_ulonglong) -> c_int;
    info_add_field_cstring = RedisModule_InfoAddFieldCString: unsafe extern "C" fn(*mut RedisModuleInfoCtx, *const c_char, *const c_char) -> c_int;
}

static API: OnceLock<Api> = OnceLock::new();

/// Resolves the table at load; the error names every missing function.
pub fn load() -> Result<(), String> {
    if API.get().is_some() {
        return Ok(());
    }
    let api = Api::resolve().map_err(|missing| {
        format!(
            "this server lacks module API functions the module needs (Redis >= 7.0 has them): {}",
            missing.join(", ")
        )
    })?;
    // Loading runs on the main thread once; a second set could only race with itself.
    let _ = API.set(api);
    Ok(())
}

/// The table, once loaded.
pub fn get() -> Option<&'static Api> {
    API.get()
}
