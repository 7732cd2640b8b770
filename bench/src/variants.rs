//! The ways of serving one request (the table's variants), and how each is sent.

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

/// How a variant sends one request, and which commands the server accounts it under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// SLIDINGWINDOW.ALLOW.
    Allow,
    /// EVALSHA of the seed script with a client-made member.
    Script,
    /// The script's four commands, pipelined, always adding: a non-atomic cost floor.
    Commands,
    /// PING: the protocol floor.
    Ping,
    /// What callers do without `LIMIT`: one single-limit SLIDINGWINDOW.ALLOW per limit, each on
    /// a key of its own (not atomic: earlier keys count a request a later one refuses).
    AllowEach,
    /// The seed script once per limit, each on a key of its own.
    ScriptEach,
    /// redis-cell's `CL.THROTTLE` (GCRA: one timestamp per key, on the server's clock), on a
    /// server of its own.
    Throttle,
}

impl Shape {
    /// The commandstats and latencystats entries of one request (lower case, as Redis names
    /// them); their usec, summed, is the request's in-command time.
    pub fn stat_names(self) -> &'static [&'static str] {
        match self {
            Shape::Allow | Shape::AllowEach => &["slidingwindow.allow"],
            Shape::Script | Shape::ScriptEach => &["evalsha"],
            Shape::Commands => &["zremrangebyscore", "zcard", "zadd", "expire"],
            Shape::Ping => &["ping"],
            Shape::Throttle => &["cl.throttle"],
        }
    }

    /// Whether the variant keeps a log per key (so memory per member means something).
    pub fn stores_keys(self) -> bool {
        !matches!(self, Shape::Ping | Shape::Throttle)
    }

    /// Whether the variant runs on the redis-cell server rather than the module's.
    pub fn on_cell_server(self) -> bool {
        self == Shape::Throttle
    }

    /// Whether the variant can serve the workload: the seed script knows one limit only, and
    /// one call per limit (or per key) is a variant only where there are several. On `tenant`,
    /// `Allow` is one ALLOWALL over both keys, `AllowEach` one ALLOW per key (each with its
    /// key's limits), `ScriptEach` the seed script once per key (with its key's longest limit).
    pub fn serves(self, workload: &Workload) -> bool {
        match self {
            Shape::Script | Shape::Commands | Shape::Throttle => workload.extra_limits.is_empty(),
            Shape::AllowEach | Shape::ScriptEach => !workload.extra_limits.is_empty(),
            Shape::Allow | Shape::Ping => true,
        }
    }

    /// Whether a request is one call per limit, on a key per limit.
    fn one_key_per_limit(self) -> bool {
        matches!(self, Shape::AllowEach | Shape::ScriptEach)
    }
}

/// One variant: a row of the table on every workload it serves.
#[derive(Debug)]
pub struct Variant {
    pub name: &'static str,
    /// A key-prefix tag, the same length for every variant so that key names weigh the same
    /// in `MEMORY USAGE`.
    pub tag: &'static str,
    pub shape: Shape,
    /// Server configs this variant runs with (`CONFIG SET` before each of its turns); every
    /// other variant runs with their values at startup.
    pub config: &'static [(&'static str, &'static str)],
    /// Its bars' colour in the chart.
    pub color: (u8, u8, u8),
}

impl PartialEq for Variant {
    fn eq(&self, other: &Variant) -> bool {
        self.name == other.name
    }
}

impl Variant {
    /// Position in ALL: the variant's place in the chart, and its own database, so that its
    /// keys never share a keyspace with another variant's (its lookups cost what they would on
    /// a server of its own).
    pub fn index(&self) -> usize {
        ALL.iter().position(|v| *v == self).unwrap_or(0)
    }
}

/// Declares each `NAME = name, tag, shape, config, color;` as `pub static NAME: Variant`.
macro_rules! variants {
    ($($id:ident = $name:literal, $tag:literal, $shape:ident, $config:expr, $color:expr;)*) => {
        $(
            pub static $id: Variant = Variant {
                name: $name,
                tag: $tag,
                shape: Shape::$shape,
                config: $config,
                color: $color,
            };
        )*
    };
}

/// Creates keys in the compact storage.
const ON_COMPACT: &[(&str, &str)] = &[("slidingwindow.storage", "compact")];

variants! {
    MODULE = "module", "mod", Allow, &[], (0x1f, 0x77, 0xb4);
    COMPACT = "compact", "cmp", Allow, ON_COMPACT, (0x94, 0x67, 0xbd);
    LUA = "lua", "lua", Script, &[], (0xff, 0x7f, 0x0e);
    COMMANDS = "commands", "cmd", Commands, &[], (0x2c, 0xa0, 0x2c);
    PING = "ping", "png", Ping, &[], (0x7f, 0x7f, 0x7f);
    MODULE_SPLIT = "module-split", "mos", AllowEach, &[], (0x17, 0xbe, 0xcf);
    COMPACT_SPLIT = "compact-split", "cms", AllowEach, ON_COMPACT, (0xbc, 0xbd, 0x22);
    LUA_SPLIT = "lua-split", "lus", ScriptEach, &[], (0x8c, 0x56, 0x4b);
    CELL = "redis-cell", "cel", Throttle, &[], (0xd6, 0x27, 0x28);
}

/// Every variant, in table order.
pub static ALL: [&Variant; 9] = [
    &MODULE,
    &COMPACT,
    &LUA,
    &COMMANDS,
    &PING,
    &CELL,
    &MODULE_SPLIT,
    &COMPACT_SPLIT,
    &LUA_SPLIT,
];

/// `SLIDINGWINDOW.ALLOW key window max now [LIMIT window max]...`: the first limit positional.
fn push_allow(
    pipe: &mut Pipeline,
    key: &str,
    mut limits: impl Iterator<Item = (u64, u64)>,
    now: u64,
) {
    let (window_s, max) = limits.next().unwrap_or((1, 1));
    let call = pipe
        .cmd("SLIDINGWINDOW.ALLOW")
        .arg(key)
        .arg(window_s)
        .arg(max)
        .arg(now);
    for (window_s, max) in limits {
        call.arg("LIMIT").arg(window_s).arg(max);
    }
}

/// Builds one variant's requests for one workload, on keys of its own.
pub struct Sender<'a> {
    shape: Shape,
    workload: &'a Workload,
    sha: &'a str,
    prefix: String,
    members: Members,
}

impl<'a> Sender<'a> {
    /// The commandstats and latencystats entries of one request (see `Shape::stat_names`).
    pub fn stat_names(&self) -> &'static [&'static str] {
        match self.shape {
            Shape::Allow if self.workload.has_tenant() => &["slidingwindow.allowall"],
            shape => shape.stat_names(),
        }
    }

    pub fn new(variant: &Variant, workload: &'a Workload, sha: &'a str) -> Sender<'a> {
        Sender {
            shape: variant.shape,
            workload,
            sha,
            prefix: format!("sw:{}:{}", variant.tag, workload.name),
            members: Members::new(MEMBER_SEED),
        }
    }

    pub fn key(&self, index: u64) -> String {
        format!("{}:{index}", self.prefix)
    }

    /// The one tenant key of a workload with tenants.
    fn tenant_key(&self) -> String {
        format!("{}:tenant", self.prefix)
    }

    /// The keys behind request key `index`: itself (and its tenant's), or one per limit for
    /// the split shapes.
    pub fn keys(&self, index: u64) -> Vec<String> {
        if self.workload.has_tenant() {
            return vec![self.key(index), self.tenant_key()];
        }
        if !self.shape.one_key_per_limit() {
            return vec![self.key(index)];
        }
        (0..self.workload.limits().count())
            .map(|j| format!("{}:{j}", self.key(index)))
            .collect()
    }

    /// Appends the commands of one request to `pipe`.
    pub fn push(&mut self, pipe: &mut Pipeline, req: Request) {
        let w = self.workload;
        let key = self.key(req.key);
        if w.has_tenant() {
            self.push_tenant(pipe, req);
            return;
        }
        match self.shape {
            Shape::Allow => push_allow(pipe, &key, w.limits(), req.now),
            Shape::Script => self.push_script(pipe, &key, (w.window_s, w.max), req.now),
            Shape::Commands => {
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
            Shape::Ping => {
                pipe.cmd("PING");
            }
            // The same rate: `max` per window, `max` at once (a burst of max - 1 beyond one).
            Shape::Throttle => {
                pipe.cmd("CL.THROTTLE")
                    .arg(key)
                    .arg(w.max - 1)
                    .arg(w.max)
                    .arg(w.window_s)
                    .arg(1);
            }
            Shape::AllowEach => {
                for (limit, key) in w.limits().zip(self.keys(req.key)) {
                    push_allow(pipe, &key, std::iter::once(limit), req.now);
                }
            }
            Shape::ScriptEach => {
                for (limit, key) in w.limits().zip(self.keys(req.key)) {
                    self.push_script(pipe, &key, limit, req.now);
                }
            }
        }
    }

    /// One EVALSHA of the seed script with a fresh client-made member.
    fn push_script(&mut self, pipe: &mut Pipeline, key: &str, limit: (u64, u64), now: u64) {
        pipe.cmd("EVALSHA")
            .arg(self.sha)
            .arg(1)
            .arg(key)
            .arg(limit.0)
            .arg(limit.1)
            .arg(now)
            .arg(self.members.next(now));
    }

    /// A request on the user's key and the tenant's: one ALLOWALL, one ALLOW per key, or the
    /// seed script once per key.
    fn push_tenant(&mut self, pipe: &mut Pipeline, req: Request) {
        let w = self.workload;
        let keys = self.keys(req.key);
        let per_key = [w.limits().collect::<Vec<_>>(), w.tenant_limits.to_vec()];
        match self.shape {
            Shape::Allow => {
                let call = pipe.cmd("SLIDINGWINDOW.ALLOWALL").arg(keys.len());
                call.arg(&keys).arg(req.now);
                for (keyno, limits) in per_key.iter().enumerate() {
                    for (window_s, max) in limits {
                        call.arg("LIMIT").arg(keyno + 1).arg(window_s).arg(max);
                    }
                }
            }
            Shape::AllowEach => {
                for (key, limits) in keys.iter().zip(&per_key) {
                    push_allow(pipe, key, limits.iter().copied(), req.now);
                }
            }
            Shape::ScriptEach => {
                for (key, limits) in keys.iter().zip(&per_key) {
                    // The key's longest limit: the script's TTL is its window, in real seconds.
                    let longest = limits.iter().max_by_key(|(window_s, _)| *window_s);
                    self.push_script(pipe, key, longest.copied().unwrap_or((1, 1)), req.now);
                }
            }
            Shape::Ping => {
                pipe.cmd("PING");
            }
            Shape::Script | Shape::Commands | Shape::Throttle => {}
        }
    }

    /// Requests admitted among `replies`, where the replies say so (only the module's do: the
    /// script's bare count is ambiguous at `count == max`); one call per limit admits a request
    /// when every call does.
    pub fn admitted(&self, replies: &[Value]) -> Option<u64> {
        // CL.THROTTLE's first field is 0 when the request is allowed, 1 when limited.
        let (calls, allowed) = match self.shape {
            Shape::Allow => (1, 1),
            Shape::AllowEach if self.workload.has_tenant() => (2, 1),
            Shape::AllowEach => (self.workload.limits().count(), 1),
            Shape::Throttle => (1, 0),
            _ => return None,
        };
        let admits = |reply: &Value| matches!(reply, Value::Array(fields) if fields.first() == Some(&Value::Int(allowed)));
        let admitted = replies
            .chunks(calls)
            .filter(|request| request.iter().all(admits))
            .count();
        Some(admitted as u64)
    }

    /// Appends a command whose reply (read by `members_in`) is how many members `key` stores.
    pub fn push_member_count(&self, pipe: &mut Pipeline, key: &str) {
        match self.shape {
            // Any storage of the module's: PEEK at time 0 trims nothing, and a cost above max
            // is never admitted, so its count is every member the key holds (no added one).
            Shape::Allow | Shape::AllowEach => {
                pipe.cmd("SLIDINGWINDOW.PEEK")
                    .arg(key)
                    .arg(self.workload.window_s)
                    .arg(1)
                    .arg(0)
                    .arg("COST")
                    .arg(2);
            }
            Shape::Script | Shape::Commands | Shape::Ping | Shape::ScriptEach | Shape::Throttle => {
                pipe.cmd("ZCARD").arg(key);
            }
        }
    }

    /// The member count in a reply to `push_member_count`.
    pub fn members_in(&self, reply: &Value) -> Result<u64> {
        let count = match (self.shape, reply) {
            (Shape::Allow | Shape::AllowEach, Value::Array(fields)) => fields.get(1),
            (_, int) => Some(int),
        };
        match count {
            Some(Value::Int(n)) => Ok(u64::try_from(*n)?),
            _ => Err(format!("{}: not a member count: {reply:?}", self.prefix).into()),
        }
    }
}
