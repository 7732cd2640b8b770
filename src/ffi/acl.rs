//! The calling user's ACL key permissions: `RedisModule_GetCurrentUserName`,
//! `GetModuleUserFromUserName` and `ACLCheckKeyPermissions`.

use super::context::Ctx;
use redis_module::raw;
use std::os::raw::c_int;
use std::ptr::NonNull;

/// The user of the running call, freed on drop; `None` inside when the call has no user (the
/// AOF's loading client), which may read every key.
pub struct Reader<'a> {
    ctx: Ctx<'a>,
    user: Option<NonNull<raw::RedisModuleUser>>,
}

impl<'a> Ctx<'a> {
    /// The calling user, to ask what keys it may read.
    pub fn reader(self) -> Reader<'a> {
        // SAFETY: the context belongs to the running command; the name is ours to free.
        let name = unsafe { (self.api.get_current_user_name)(self.raw()) };
        let user = NonNull::new(name).and_then(|name| {
            // SAFETY: a live string; the user is ours to free (in `drop`).
            let user = unsafe { (self.api.get_module_user_from_user_name)(name.as_ptr()) };
            // SAFETY: the string created above, freed once.
            unsafe { (self.api.free_string)(self.raw(), name.as_ptr()) };
            NonNull::new(user)
        });
        Reader { ctx: self, user }
    }
}

impl Reader<'_> {
    /// Whether the user's key patterns let it read `key`.
    pub fn may_read(&self, key: &[u8]) -> bool {
        let Some(user) = self.user else {
            return true;
        };
        let Ok(name) = self.ctx.string(key) else {
            return false;
        };
        let flags = raw::REDISMODULE_CMD_KEY_ACCESS as c_int;
        // SAFETY: a live user and a live string of this call.
        let r =
            unsafe { (self.ctx.api.acl_check_key_permissions)(user.as_ptr(), name.raw(), flags) };
        r == raw::REDISMODULE_OK as c_int
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(user) = self.user {
            // SAFETY: the user made in `reader`, freed once.
            unsafe { (self.ctx.api.free_module_user)(user.as_ptr()) };
        }
    }
}
