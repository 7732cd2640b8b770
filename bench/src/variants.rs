//! The four ways of serving one request, and how each is sent.

use redis::{Connection, Pipeline, Value};

use crate::Result;
use crate::members::Members;
use crate::workload::{Request, Workload};

/// The seed's script, verbatim (seeds/000_d98e3b7d69425237.txt, section 2.1).
pub const SEED_SCRIPT: &str = r#"
local key      = KEYS[1]
local window   = tonumber(ARGV[1])  -- 窗口大小，单位：秒
local maxLen   = tonumber(ARGV[2])  -- 最大允许的记录数
local now      = tonumber(ARGV[3])  -- 毫秒级 Unix 时间戳
local member   = ARGV[4]            -- 唯一标识（UUID/RequestID）

-- 步骤1：清理过期记录
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window * 1000)

-- 步骤2：统计当前窗口内的数量
local count = redis.call('ZCARD', key)

-- 步骤3：判断并插入
if count >= maxLen then
    return count  -- 超限，直接返回
end

-- 步骤4：放行，添加记录
redis.call('ZADD', key, now, member)
redis.call('EXPIRE', key, window)

return count + 1
"#;

const MEMBER_SEED: u64 = 0x3E3B;

/// Loads the seed script once; the Lua variant calls it by SHA.
pub fn load_script(con: &mut Connection) -> Result<String> {
    Ok(redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SEED_SCRIPT)
        .query(con)?)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// SLIDINGWINDOW.ALLOW.
    Module,
    /// EVALSHA of the seed script with a client-made member.
    Lua,
    /// The script's four commands, pipelined, always adding: a non-atomic cost floor.
    Commands,
    /// PING: the protocol floor.
    Ping,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::Module,
        Variant::Lua,
        Variant::Commands,
        Variant::Ping,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Module => "module",
            Variant::Lua => "lua",
            Variant::Commands => "commands",
            Variant::Ping => "ping",
        }
    }

    /// A key-prefix tag, the same length for every variant so that key names weigh the same in
    /// `MEMORY USAGE`.
    pub fn tag(self) -> &'static str {
        match self {
            Variant::Module => "mod",
            Variant::Lua => "lua",
            Variant::Commands => "cmd",
            Variant::Ping => "png",
        }
    }

    /// The commandstats entries whose usec, summed, is this variant's in-command time.
    pub fn stat_names(self) -> &'static [&'static str] {
        match self {
            Variant::Module => &["slidingwindow.allow"],
            Variant::Lua => &["evalsha"],
            Variant::Commands => &["zremrangebyscore", "zcard", "zadd", "expire"],
            Variant::Ping => &["ping"],
        }
    }

    /// Whether the variant keeps sorted sets (so memory per member means something).
    pub fn stores_keys(self) -> bool {
        self != Variant::Ping
    }
}

/// Builds one variant's requests for one workload, on keys of its own.
pub struct Sender<'a> {
    variant: Variant,
    workload: &'a Workload,
    sha: &'a str,
    prefix: String,
    members: Members,
}

impl<'a> Sender<'a> {
    pub fn new(variant: Variant, workload: &'a Workload, sha: &'a str) -> Sender<'a> {
        Sender {
            variant,
            workload,
            sha,
            prefix: format!("sw:{}:{}", variant.tag(), workload.name),
            members: Members::new(MEMBER_SEED),
        }
    }

    pub fn key(&self, index: u64) -> String {
        format!("{}:{index}", self.prefix)
    }

    /// Appends the commands of one request to `pipe`.
    pub fn push(&mut self, pipe: &mut Pipeline, req: Request) {
        let w = self.workload;
        let key = self.key(req.key);
        match self.variant {
            Variant::Module => {
                pipe.cmd("SLIDINGWINDOW.ALLOW")
                    .arg(key)
                    .arg(w.window_s)
                    .arg(w.max)
                    .arg(req.now);
            }
            Variant::Lua => {
                pipe.cmd("EVALSHA")
                    .arg(self.sha)
                    .arg(1)
                    .arg(key)
                    .arg(w.window_s)
                    .arg(w.max)
                    .arg(req.now)
                    .arg(self.members.next(req.now));
            }
            Variant::Commands => {
                let cutoff = req.now - w.window_ms();
                pipe.cmd("ZREMRANGEBYSCORE")
                    .arg(&key)
                    .arg("-inf")
                    .arg(cutoff);
                pipe.cmd("ZCARD").arg(&key);
                pipe.cmd("ZADD")
                    .arg(&key)
                    .arg(req.now)
                    .arg(self.members.next(req.now));
                pipe.cmd("EXPIRE").arg(&key).arg(w.window_s);
            }
            Variant::Ping => {
                pipe.cmd("PING");
            }
        }
    }

    /// Requests admitted among `replies`, where the reply says so (only the module's does:
    /// the script's bare count is ambiguous at `count == max`).
    pub fn admitted(&self, replies: &[Value]) -> Option<u64> {
        if self.variant != Variant::Module {
            return None;
        }
        let admitted = replies
            .iter()
            .filter(|reply| matches!(reply, Value::Array(fields) if fields.first() == Some(&Value::Int(1))))
            .count();
        Some(admitted as u64)
    }
}
