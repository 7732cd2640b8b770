-- The SLIDINGWINDOW commands as a Lua script, for servers that cannot load the module (managed
-- Redis). It follows the module's contract (docs: README.md, "Command reference"): same
-- arguments, same replies, same error texts, and the same data (a sorted set scored in ms, one
-- 26-character ULID member per admitted request), so keys written by either are read correctly by
-- the other. The Python and Node.js helpers in clients/ both load this file.
--
-- KEYS      the key; for ALLOWALL and PEEKALL, all of their keys
-- ARGV[1]   'allow', 'peek', 'allowall', 'peekall' or 'refund', optionally followed by the
--           module's configs as its load line takes them, one space apart:
--           'allow lateness 5000 max-members-per-call 100000' (defaults: the module's, lateness 0
--           and max-members-per-call 100000)
-- ARGV[2]   16 random Crockford base32 characters from the caller: the random part of the first
--           new member (scripts have no good randomness of their own)
-- ARGV[3..] the command's own arguments after its key:
--             allow, peek        window max now [COST n] [LIMIT window max]... [LEASE ms]
--                                [PRECISION p] [DETAIL]
--             allowall, peekall  numkeys now [COST n] LIMIT keyno window max [LIMIT ...]...
--                                [LEASE ms] [PRECISION p] [DETAIL]
--                                (numkeys as the caller wrote it; the keys themselves are KEYS)
--             refund             n [AT ts]
--
-- Known differences, all outside real traffic: waits above 2^53 ms (285,000 years) may be off
-- by one ms, and a score of +inf written by hand gives an undefined wait (Lua numbers are doubles).

local MAX_EXACT = '9007199254740992'
local MAX_WINDOW = '9007199254740'
local MAX_ADD = 100000
local LATENESS = 0
local MAX_LIMITS = 16
local MAX_KEYS = 16
local ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'

local function fmt(n)
  return string.format('%d', n)
end

local function fail(text)
  return redis.error_reply(text)
end

-- User bytes in an error line: printable ASCII kept, the rest as \xNN, cut after 64 bytes.
local function token(s)
  local out = {}
  for i = 1, math.min(#s, 64) do
    local b = string.byte(s, i)
    if b >= 32 and b <= 126 then
      out[#out + 1] = string.char(b)
    else
      out[#out + 1] = string.format('\\x%02x', b)
    end
  end
  if #s > 64 then
    out[#out + 1] = '...'
  end
  return table.concat(out)
end

-- A plain decimal integer (ASCII digits only) in lo..hi; hi is a digit string, compared as text
-- so that values just above 2^53 (which round to 2^53 as doubles) are refused.
local function integer(s, lo, hi)
  if not string.find(s, '^[0-9]+$') then
    return nil
  end
  local digits = string.gsub(s, '^0+', '')
  if digits == '' then
    digits = '0'
  end
  if #digits > #hi or (#digits == #hi and digits > hi) then
    return nil
  end
  local v = tonumber(digits)
  if v < lo then
    return nil
  end
  return v
end

local WINDOW_ERR = ' must be an integer between 1 and ' .. MAX_WINDOW .. ' (window * 1000 <= 2^53)'
local MAX_ERR = ' must be an integer between 1 and ' .. MAX_EXACT

-- A LIMIT option's window and max, from ARGV[at] and ARGV[at + 1], as a limit on key; nil and
-- the error text when either is out of range.
local function limit_at(at, key)
  local w = integer(ARGV[at], 1, MAX_WINDOW)
  if not w then
    return nil, 'ERR LIMIT window' .. WINDOW_ERR
  end
  local m = integer(ARGV[at + 1], 1, MAX_EXACT)
  if not m then
    return nil, 'ERR LIMIT max' .. MAX_ERR
  end
  return { key = key, w = w * 1000, max = m }
end
local NOW_ERR = ' must be an integer between 0 and ' .. MAX_EXACT .. ', or *'
local LEASE_ERR = 'ERR LEASE must be an integer between 1 and ' .. MAX_EXACT .. ' - now (now + LEASE <= 2^53)'
local PRECISION_ERR = 'ERR PRECISION must be an integer between 1 and ' .. MAX_EXACT .. ' (now + LEASE rounded up to a multiple of PRECISION <= 2^53)'

-- ARGV[1]: the command, then the configs' `name value` pairs.
local words = {}
for word in string.gmatch(ARGV[1] or '', '[^ ]+') do
  words[#words + 1] = word
end
local command = words[1]
local CONFIGS = {
  ['lateness'] = { lo = 0, hi = '86400000' },
  ['max-members-per-call'] = { lo = 1, hi = '10000000' },
}
for w = 2, #words, 2 do
  local name = string.lower(words[w])
  local config = CONFIGS[name]
  local value = words[w + 1] and integer(words[w + 1], config and config.lo or 0, config and config.hi or '0')
  if not config then
    return fail("ERR slidingwindow.lua: unknown config '" .. token(words[w]) .. "' in ARGV[1] (configs: lateness, max-members-per-call)")
  end
  if not value then
    return fail('ERR slidingwindow.lua: config ' .. name .. ' must be an integer between ' .. config.lo .. ' and ' .. config.hi)
  end
  if name == 'lateness' then
    LATENESS = value
  else
    MAX_ADD = value
  end
end
local several = command == 'allowall' or command == 'peekall'
if not several and command ~= 'allow' and command ~= 'peek' and command ~= 'refund' then
  return fail('ERR slidingwindow.lua: ARGV[1] must be allow, peek, allowall, peekall or refund')
end
-- The module's argv would be: name, the keys, then ARGV[3..].
local argc = 1 + (several and #KEYS or 1) + math.max(0, #ARGV - 2)
local least = 5
if command == 'refund' then
  least = 3
elseif several then
  -- numkeys key now LIMIT keyno window max
  least = 8
end
if argc < least or (not several and KEYS[1] == nil) then
  return fail("ERR wrong number of arguments for 'slidingwindow." .. command .. "' command")
end
local entropy = ARGV[2]
if not string.find(entropy, '^[0-9A-HJKMNP-TV-Z]+$') or #entropy ~= 16 then
  return fail('ERR slidingwindow.lua: ARGV[2] must be 16 Crockford base32 characters')
end

-- The server's clock in ms, read once per call: `*` and the TTLs agree, as in the module.
local clock = nil
local function server_clock()
  if clock == nil then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return clock
end

local function server_now()
  return math.min(server_clock(), tonumber(MAX_EXACT))
end

-- Any key of another type refuses the call before anything is written.
local function check_types(keys)
  for _, k in ipairs(keys) do
    local kind = redis.call('TYPE', k)['ok']
    if kind ~= 'zset' and kind ~= 'none' then
      return false
    end
  end
  return true
end
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'

-- REFUND key n [AT ts]: removes the n newest members scored <= ts (any score without AT).
if command == 'refund' then
  local key = KEYS[1]
  local n = integer(ARGV[3], 1, MAX_EXACT)
  if not n then
    return fail('ERR n' .. MAX_ERR)
  end
  local seen = false
  local at = nil
  local i = 4
  while i <= #ARGV do
    local option = ARGV[i]
    if string.upper(option) ~= 'AT' then
      return fail("ERR syntax error, unknown option '" .. token(option) .. "'")
    end
    if seen then
      return fail("ERR syntax error, option '" .. token(option) .. "' given twice")
    end
    if i + 1 > #ARGV then
      return fail("ERR syntax error, option '" .. token(option) .. "' needs a value")
    end
    seen = true
    if ARGV[i + 1] ~= '*' then
      at = integer(ARGV[i + 1], 0, MAX_EXACT)
      if not at then
        return fail('ERR AT' .. NOW_ERR)
      end
    end
    i = i + 2
  end
  if seen and at == nil then
    at = server_now()
  end
  if not check_types({ key }) then
    return fail(WRONGTYPE)
  end
  local top = at and fmt(at) or '+inf'
  local removed = 0
  while removed < n do
    local batch = redis.call('ZREVRANGEBYSCORE', key, top, '-inf', 'LIMIT', 0, fmt(math.min(n - removed, 1000)))
    if #batch == 0 then
      break
    end
    removed = removed + redis.call('ZREM', key, unpack(batch))
  end
  return removed
end

-- Parse exactly as the module does: positional arguments in order, then options left to right.
-- Every limit names its key; `keys` lists the distinct keys in order, each with its longest window.
local keys = {}
local limits = {}
local now_arg
local first_option
if several then
  -- A caller who could not split off numkeys keys and now (too few arguments) passes no keys.
  local numkeys = integer(ARGV[3], 1, tostring(MAX_KEYS))
  if not numkeys or numkeys ~= #KEYS or #ARGV < 4 then
    return fail('ERR numkeys must be an integer between 1 and ' .. MAX_KEYS .. ', followed by that many keys and now')
  end
  for k = 1, numkeys do
    for first = 1, k - 1 do
      if KEYS[first] == KEYS[k] then
        return fail('ERR key ' .. k .. ' is key ' .. first .. ' again: the keys of one call must be distinct')
      end
    end
    keys[k] = { name = KEYS[k], wmax = 0, limits = 0 }
  end
  now_arg, first_option = ARGV[4], 5
else
  local window = integer(ARGV[3], 1, MAX_WINDOW)
  if not window then
    return fail('ERR window' .. WINDOW_ERR)
  end
  local max = integer(ARGV[4], 1, MAX_EXACT)
  if not max then
    return fail('ERR max' .. MAX_ERR)
  end
  keys[1] = { name = KEYS[1], wmax = 0, limits = 0 }
  limits[1] = { key = keys[1], w = window * 1000, max = max }
  now_arg, first_option = ARGV[5], 6
end
local now = nil
if now_arg ~= '*' then
  now = integer(now_arg, 0, MAX_EXACT)
  if not now then
    return fail('ERR now' .. NOW_ERR)
  end
end
-- now + ms <= 2^53, compared as 2^53 - now (exact) so that no sum rounds.
local function lease_fits(ms, at)
  return ms <= tonumber(MAX_EXACT) - at
end
-- Where an admitted call's members are scored: at + ms (a lease fits), rounded up to a multiple
-- of p; nil past 2^53. Exact: fmod of doubles is exact, and the last sum is compared as a
-- difference.
local function score_of(at, ms, p)
  local s = at + (ms or 0)
  local r = p and math.fmod(s, p) or 0
  if r == 0 then
    return s
  end
  local base = s - r
  if p > tonumber(MAX_EXACT) - base then
    return nil
  end
  return base + p
end
local cost = nil
local lease = nil
local precision = nil
local detail = false
local i = first_option
while i <= #ARGV do
  local option = ARGV[i]
  local name = string.upper(option)
  if name == 'COST' or name == 'LEASE' or name == 'PRECISION' then
    if (name == 'COST' and cost) or (name == 'LEASE' and lease) or (name == 'PRECISION' and precision) then
      return fail("ERR syntax error, option '" .. token(option) .. "' given twice")
    end
    if i + 1 > #ARGV then
      return fail("ERR syntax error, option '" .. token(option) .. "' needs a value")
    end
    local v = integer(ARGV[i + 1], 1, MAX_EXACT)
    if name == 'COST' then
      if not v then
        return fail('ERR cost' .. MAX_ERR)
      end
      cost = v
    elseif name == 'LEASE' then
      -- Checked when read, so the first error read wins: on the caller's clock exactly, on `*`
      -- against the earliest clock there is (the server's is past 0), again once it is read.
      if not v or not lease_fits(v, now or 1) then
        return fail(LEASE_ERR)
      end
      lease = v
      if precision and not score_of(now or 1, lease, precision) then
        return fail(PRECISION_ERR)
      end
    else
      -- The score it gives is checked when read too, as the lease is.
      if not v or not score_of(now or 1, lease, v) then
        return fail(PRECISION_ERR)
      end
      precision = v
    end
    i = i + 2
  elseif name == 'DETAIL' then
    if detail then
      return fail("ERR syntax error, option '" .. token(option) .. "' given twice")
    end
    detail = true
    i = i + 1
  elseif name == 'LIMIT' and several then
    if i + 3 > #ARGV then
      return fail("ERR syntax error, option '" .. token(option) .. "' needs three values (keyno window max)")
    end
    local keyno = integer(ARGV[i + 1], 1, tostring(#keys))
    if not keyno then
      return fail('ERR LIMIT keyno must be an integer between 1 and numkeys (' .. #keys .. ')')
    end
    local k = keys[keyno]
    if k.limits >= MAX_LIMITS then
      return fail('ERR syntax error, at most ' .. MAX_LIMITS .. ' limits on one key (key ' .. keyno .. ')')
    end
    local limit, err = limit_at(i + 2, k)
    if not limit then
      return fail(err)
    end
    k.limits = k.limits + 1
    limits[#limits + 1] = limit
    i = i + 4
  elseif name == 'LIMIT' then
    if #limits >= MAX_LIMITS then
      return fail('ERR syntax error, at most ' .. MAX_LIMITS .. ' limits in one call')
    end
    if i + 2 > #ARGV then
      return fail("ERR syntax error, option '" .. token(option) .. "' needs two values")
    end
    local limit, err = limit_at(i + 1, keys[1])
    if not limit then
      return fail(err)
    end
    limits[#limits + 1] = limit
    i = i + 3
  else
    return fail("ERR syntax error, unknown option '" .. token(option) .. "'")
  end
end
local n = cost or 1

if several then
  for k, key in ipairs(keys) do
    if key.limits == 0 then
      return fail('ERR key ' .. k .. ' has no LIMIT: every key needs at least one')
    end
  end
end

if now == nil then
  now = server_now()
  if lease and not lease_fits(lease, now) then
    return fail(LEASE_ERR)
  end
end
-- A lease's members are scored at its end, rounded up to the precision.
local at = score_of(now, lease, precision)
if not at then
  return fail(PRECISION_ERR)
end

local names = {}
for k, key in ipairs(keys) do
  names[k] = key.name
end
if not check_types(names) then
  return fail(WRONGTYPE)
end

-- Everything below is computed before any write, as if the trims and the adds had happened, so
-- PEEK and ALLOW (and PEEKALL and ALLOWALL) answer from the very same code.
local allowed = true
for _, l in ipairs(limits) do
  if l.w > l.key.wmax then
    l.key.wmax = l.w
  end
  l.cutoff = now - l.w
  l.below = redis.call('ZCOUNT', l.key.name, '-inf', fmt(l.cutoff))
  l.stored = redis.call('ZCOUNT', l.key.name, '(' .. fmt(l.cutoff), '+inf')
  -- max - stored is exact where stored + n might round past 2^53.
  if n > l.max - l.stored then
    allowed = false
  end
end
-- The cap counts every key: COST members on each.
if allowed and n * #keys > MAX_ADD then
  local times = #keys > 1 and (' times ' .. #keys .. ' keys') or ''
  return fail('ERR cost ' .. fmt(n) .. times .. ' would add more than ' .. MAX_ADD .. ' members in one call')
end

local function score_at(key, rank)
  return tonumber(redis.call('ZRANGE', key.name, rank, rank, 'WITHSCORES')[2])
end

-- ms until a member scored s leaves a window whose cutoff is c (rounded up, never negative).
local function wait(s, c)
  return math.max(0, math.ceil(s) - c)
end

-- Score of the k-th oldest member in limit l's window, counting the n members an admitted call
-- adds at `at` (now, or the end of its lease).
local function kth(l, k)
  if allowed then
    local up_to_at = redis.call('ZCOUNT', l.key.name, '(' .. fmt(l.cutoff), fmt(at))
    if k > up_to_at then
      if k <= up_to_at + n then
        return at
      end
      k = k - n
    end
  end
  return score_at(l.key, l.below + k - 1)
end

local best = nil
local retry = 0
for index, l in ipairs(limits) do
  l.count = l.stored
  if allowed then
    l.count = l.stored + n
  end
  l.remaining = math.max(0, l.max - l.count)
  if n > l.max then
    l.retry = -1
  else
    local need = l.count + n - l.max
    if need <= 0 then
      l.retry = 0
    else
      l.retry = wait(kth(l, need), l.cutoff)
    end
  end
  if l.count == 0 then
    l.reset = 0
  else
    local key = l.key
    if key.newest == nil then
      key.newest = score_at(key, -1)
      if allowed and (key.newest == nil or key.newest < at) then
        key.newest = at
      end
    end
    l.reset = wait(key.newest, l.cutoff)
  end
  if l.retry == -1 or retry == -1 then
    retry = -1
  elseif l.retry > retry then
    retry = l.retry
  end
  -- The binding limit: least remaining, then the longest wait (-1 is infinite), then the
  -- longest window, then the earliest position.
  if best == nil then
    best = index
  else
    local b = limits[best]
    local lr = l.retry == -1 and math.huge or l.retry
    local br = b.retry == -1 and math.huge or b.retry
    if l.remaining < b.remaining
        or (l.remaining == b.remaining and (lr > br or (lr == br and l.w > b.w))) then
      best = index
    end
  end
end

local b = limits[best]
local reply = { allowed and 1 or 0, b.count, b.remaining, retry, b.reset }
if several or #limits > 1 or detail then
  reply[6] = best - 1
end
-- DETAIL: every limit's state in limit order, then the now used.
if detail then
  local states = {}
  for index, l in ipairs(limits) do
    states[index] = { l.count, l.remaining, l.retry, l.reset }
  end
  reply[7] = states
  reply[8] = now
end

if command == 'peek' or command == 'peekall' then
  return reply
end

-- Members: ULIDs whose time part is now (mod 2^48) and whose random part counts up from the
-- caller's entropy, so the members of one call are distinct; NX skips any name already held.
local function encode(v, len)
  local out = {}
  for p = len, 1, -1 do
    local d = v % 32
    out[p] = string.sub(ALPHABET, d + 1, d + 1)
    v = (v - d) / 32
  end
  return table.concat(out)
end
local time_part = encode(at % 281474976710656, 10)
local score = fmt(at)

local function add(key)
  local high = {}
  for p = 1, 12 do
    high[p] = string.find(ALPHABET, string.sub(entropy, p, p), 1, true) - 1
  end
  local low = 0
  for p = 13, 16 do
    low = low * 32 + string.find(ALPHABET, string.sub(entropy, p, p), 1, true) - 1
  end
  local function prefix()
    local out = {}
    for p = 1, 12 do
      out[p] = string.sub(ALPHABET, high[p] + 1, high[p] + 1)
    end
    return time_part .. table.concat(out)
  end
  local head = prefix()
  local added = 0
  while added < n do
    local batch = {}
    for _ = 1, math.min(n - added, 1000) do
      low = low + 1
      if low == 1048576 then
        low = 0
        local p = 12
        while p >= 1 do
          high[p] = (high[p] + 1) % 32
          if high[p] ~= 0 then
            break
          end
          p = p - 1
        end
        head = prefix()
      end
      batch[#batch + 1] = score
      batch[#batch + 1] = head .. encode(low, 4)
    end
    added = added + redis.call('ZADD', key, 'NX', unpack(batch))
  end
end

-- Lateness keeps G more ms. An admission's expiry covers the longest window, the lateness and
-- how far ahead of now its members are scored, from the server's clock; it never moves a key's
-- expiry earlier, and a key without one gets it (PEXPIRE ... GT alone would leave it without).
for _, key in ipairs(keys) do
  redis.call('ZREMRANGEBYSCORE', key.name, '-inf', fmt(now - key.wmax - LATENESS))
  if allowed then
    add(key.name)
    local expire_at = server_clock() + key.wmax + LATENESS + (at - now)
    local current = redis.call('PEXPIRETIME', key.name)
    if current < 0 or current < expire_at then
      redis.call('PEXPIREAT', key.name, fmt(expire_at))
    end
  end
end
return reply
