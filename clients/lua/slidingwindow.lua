-- SLIDINGWINDOW.ALLOW / SLIDINGWINDOW.PEEK as a Lua script, for servers that cannot load the
-- module (managed Redis). It follows the module's contract (docs: README.md, "Command
-- reference"): same arguments, same replies, same error texts, and the same data (a sorted set
-- scored in ms, one 26-character ULID member per admitted request), so keys written by either
-- are read correctly by the other. The Python and Node.js helpers in clients/ both load this file.
--
-- KEYS[1]  the key
-- ARGV[1]  'allow' or 'peek'
-- ARGV[2]  16 random Crockford base32 characters from the caller: the random part of the first
--          new member (scripts have no good randomness of their own)
-- ARGV[3..] the command's own arguments: window max now [COST n] [LIMIT window max]...
--
-- Known differences, all outside real traffic: waits above 2^53 ms (285,000 years) may be off
-- by one ms, and a score of +inf written by hand gives an undefined wait (Lua numbers are doubles).

local MAX_EXACT = '9007199254740992'
local MAX_WINDOW = '9007199254740'
local MAX_ADD = 100000
local MAX_LIMITS = 16
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

local key = KEYS[1]
local command = ARGV[1]
if #ARGV < 5 or key == nil then
  return fail("ERR wrong number of arguments for 'slidingwindow." .. tostring(command) .. "' command")
end
local entropy = ARGV[2]
if not string.find(entropy, '^[0-9A-HJKMNP-TV-Z]+$') or #entropy ~= 16 then
  return fail('ERR slidingwindow.lua: ARGV[2] must be 16 Crockford base32 characters')
end

-- Parse exactly as the module does: positional arguments in order, then options left to right.
local window = integer(ARGV[3], 1, MAX_WINDOW)
if not window then
  return fail('ERR window' .. WINDOW_ERR)
end
local max = integer(ARGV[4], 1, MAX_EXACT)
if not max then
  return fail('ERR max' .. MAX_ERR)
end
local now = nil
if ARGV[5] ~= '*' then
  now = integer(ARGV[5], 0, MAX_EXACT)
  if not now then
    return fail('ERR now must be an integer between 0 and ' .. MAX_EXACT .. ', or *')
  end
end
local limits = { { w = window * 1000, max = max } }
local cost = nil
local i = 6
while i <= #ARGV do
  local option = ARGV[i]
  local name = string.upper(option)
  if name == 'COST' then
    if cost then
      return fail("ERR syntax error, option '" .. token(option) .. "' given twice")
    end
    if i + 1 > #ARGV then
      return fail("ERR syntax error, option '" .. token(option) .. "' needs a value")
    end
    cost = integer(ARGV[i + 1], 1, MAX_EXACT)
    if not cost then
      return fail('ERR cost' .. MAX_ERR)
    end
    i = i + 2
  elseif name == 'LIMIT' then
    if #limits >= MAX_LIMITS then
      return fail('ERR syntax error, at most ' .. MAX_LIMITS .. ' limits in one call')
    end
    if i + 2 > #ARGV then
      return fail("ERR syntax error, option '" .. token(option) .. "' needs two values")
    end
    local w = integer(ARGV[i + 1], 1, MAX_WINDOW)
    if not w then
      return fail('ERR LIMIT window' .. WINDOW_ERR)
    end
    local m = integer(ARGV[i + 2], 1, MAX_EXACT)
    if not m then
      return fail('ERR LIMIT max' .. MAX_ERR)
    end
    limits[#limits + 1] = { w = w * 1000, max = m }
    i = i + 3
  else
    return fail("ERR syntax error, unknown option '" .. token(option) .. "'")
  end
end
local n = cost or 1

if now == nil then
  local t = redis.call('TIME')
  now = math.min(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(MAX_EXACT))
end

local kind = redis.call('TYPE', key)['ok']
if kind ~= 'zset' and kind ~= 'none' then
  return fail('WRONGTYPE Operation against a key holding the wrong kind of value')
end

-- Everything below is computed before any write, as if the trim and the add had happened, so
-- PEEK and ALLOW answer from the very same code.
local wmax = 0
local allowed = true
for _, l in ipairs(limits) do
  if l.w > wmax then
    wmax = l.w
  end
  l.cutoff = now - l.w
  l.below = redis.call('ZCOUNT', key, '-inf', fmt(l.cutoff))
  l.stored = redis.call('ZCOUNT', key, '(' .. fmt(l.cutoff), '+inf')
  -- max - stored is exact where stored + n might round past 2^53.
  if n > l.max - l.stored then
    allowed = false
  end
end
if allowed and n > MAX_ADD then
  return fail('ERR cost ' .. fmt(n) .. ' would add more than ' .. MAX_ADD .. ' members in one call')
end

local function score_at(rank)
  return tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2])
end

-- ms until a member scored s leaves a window whose cutoff is c (rounded up, never negative).
local function wait(s, c)
  return math.max(0, math.ceil(s) - c)
end

-- Score of the k-th oldest member in limit l's window, counting the n members an admitted call adds at now.
local function kth(l, k)
  if allowed then
    local up_to_now = redis.call('ZCOUNT', key, '(' .. fmt(l.cutoff), fmt(now))
    if k > up_to_now then
      if k <= up_to_now + n then
        return now
      end
      k = k - n
    end
  end
  return score_at(l.below + k - 1)
end

local newest = nil
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
    if newest == nil then
      newest = score_at(-1)
      if allowed and (newest == nil or newest < now) then
        newest = now
      end
    end
    l.reset = wait(newest, l.cutoff)
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
if #limits > 1 then
  reply[6] = best - 1
end

if command ~= 'allow' then
  return reply
end

redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - wmax))
if allowed then
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
  local high = {}
  for p = 1, 12 do
    high[p] = string.find(ALPHABET, string.sub(entropy, p, p), 1, true) - 1
  end
  local low = 0
  for p = 13, 16 do
    low = low * 32 + string.find(ALPHABET, string.sub(entropy, p, p), 1, true) - 1
  end
  local time_part = encode(now % 281474976710656, 10)
  local function prefix()
    local out = {}
    for p = 1, 12 do
      out[p] = string.sub(ALPHABET, high[p] + 1, high[p] + 1)
    end
    return time_part .. table.concat(out)
  end
  local head = prefix()
  local score = fmt(now)
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
  redis.call('PEXPIRE', key, fmt(wmax))
end
return reply
