// The Lua scripts the Redis store runs (EVALSHA; EVAL when the server answers NOSCRIPT).
// Each read-modify-write of shared state is one script, so it is atomic on the server.
// The limit arithmetic mirrors src/limits/limiters.cpp step for step (the unit tests of
// that file are the specification); time is the server's (TIME), so every replica
// agrees on windows and calendar days whatever its own clock says.
#pragma once

namespace tahua::redis_scripts {

// Shared helpers: the server's time in ms and the UTC calendar period of a quota.
#define TAHUA_LUA_PRELUDE                                                                        \
  "local t = redis.call('TIME')\n"                                                              \
  "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                     \
  "local function days_from_civil(y, m, d)\n"                                                   \
  "  if m <= 2 then y = y - 1 end\n"                                                            \
  "  local era = math.floor(y / 400)\n"                                                         \
  "  local yoe = y - era * 400\n"                                                               \
  "  local mp = (m + 9) % 12\n"                                                                 \
  "  local doy = math.floor((153 * mp + 2) / 5) + d - 1\n"                                      \
  "  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy\n"              \
  "  return era * 146097 + doe - 719468\n"                                                      \
  "end\n"                                                                                       \
  "local function civil_from_days(z)\n"                                                         \
  "  z = z + 719468\n"                                                                          \
  "  local era = math.floor(z / 146097)\n"                                                      \
  "  local doe = z - era * 146097\n"                                                            \
  "  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)\n" \
  "  local y = yoe + era * 400\n"                                                               \
  "  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))\n"            \
  "  local mp = math.floor((5 * doy + 2) / 153)\n"                                              \
  "  local m = mp < 10 and mp + 3 or mp - 9\n"                                                  \
  "  if m <= 2 then y = y + 1 end\n"                                                            \
  "  return y, m\n"                                                                             \
  "end\n"                                                                                       \
  "local function period(cal, at)\n"                                                            \
  "  local day = math.floor(at / 86400000)\n"                                                   \
  "  if cal == 0 then return day, (day + 1) * 86400000 end\n"                                   \
  "  local y, m = civil_from_days(day)\n"                                                       \
  "  local ny, nm = y, m + 1\n"                                                                 \
  "  if nm > 12 then nm = 1; ny = y + 1 end\n"                                                  \
  "  return (y - 1970) * 12 + m - 1, days_from_civil(ny, nm, 1) * 86400000\n"                   \
  "end\n"

// A counter is one string "a b c t" (SET with PX: state and expiry in one command), so
// a decision over n counters is TIME, one MGET and at most n SETs.
#define TAHUA_LUA_STATE                                                                        \
  "local function parse(v)\n"                                                                 \
  "  if not v then return nil, 0, 0, nil end\n"                                               \
  "  local a, b, c, t = string.match(v, '^(%S+) (%S+) (%S+) (%S+)$')\n"                      \
  "  if t == '-' then t = nil end\n"                                                          \
  "  return tonumber(a), tonumber(b) or 0, tonumber(c) or 0, tonumber(t)\n"                   \
  "end\n"                                                                                     \
  "-- A bucket refilled up to now (a new one starts full), as limiters.cpp's refill().\n"      \
  "local function refill(a, tok, limit, P)\n"                                                \
  "  if tok == nil or a == nil then return now, limit end\n"                                 \
  "  if now > a then return now, math.min(limit, tok + (now - a) * limit / P) end\n"        \
  "  return a, tok\n"                                                                        \
  "end\n"                                                                                     \
  "local function state(a, b, c, t)\n"                                                        \
  "  return string.format('%d %d %d %s', a or 0, b or 0, c or 0, t and string.format('%.17g', t) or '-')\n" \
  "end\n"

// KEYS: the counters (mode 2: then the call's marker). ARGV[1]: 1 = charge when every
// check allows, 0 = only look, 2 = charge and note what was charged in the marker (so a
// call whose answer is lost can be undone exactly: kUndoAdmit; a marker already there
// means it was undone before it arrived, and nothing is charged).
// Then six per check: kind (0 window, 1 bucket, 2 quota), limit, period_ms,
// calendar (0 day, 1 month), cost, want (a lease: up to this much more is charged when
// there is room, for the replica to admit later requests from without asking).
// Returns {allowed, denied (1-based, 0 = none), now, then per check: allowed, never,
// remaining (after what was charged), reset_ms, retry_ms, charged (cost + lease)}.
inline constexpr const char* kAdmit = TAHUA_LUA_PRELUDE TAHUA_LUA_STATE R"LUA(
local mode = tonumber(ARGV[1])
local charge = mode >= 1
local n = #KEYS
if mode == 2 then
  n = n - 1
  if redis.call('EXISTS', KEYS[n + 1]) == 1 then return {0, 0, now} end
end
local vals = redis.call('MGET', unpack(KEYS, 1, n))
local states = {}
local out = {1, 0, now}
for i = 1, n do
  local base = 1 + (i - 1) * 6
  local kind = tonumber(ARGV[base + 1])
  local limit = tonumber(ARGV[base + 2])
  local P = tonumber(ARGV[base + 3])
  local cal = tonumber(ARGV[base + 4])
  local cost = tonumber(ARGV[base + 5])
  local want = charge and tonumber(ARGV[base + 6]) or 0
  local a, b, c, tok = parse(vals[i])
  local allowed, never, remaining, reset, retry = 0, 0, 0, 0, 0
  local st = {kind = kind, limit = limit, P = P, cost = cost}
  if cost > limit then never = 1 end
  if kind == 0 then
    local start = now - (now % P)
    if a ~= start then
      if a == start - P then b = c else b = 0 end
      c = 0
      a = start
    end
    local e = now - a
    local used = b * (P - e) + c * P
    local cap = limit * P
    if never == 0 and used + cost * P <= cap then allowed = 1 end
    if allowed == 1 and want > 0 then
      cost = cost + math.min(want, math.floor((cap - used - cost * P) / P))
      st.cost = cost
    end
    local after = used + (allowed == 1 and cost * P or 0)
    if after < cap then remaining = math.floor((cap - after) / P) end
    local cur = c + (allowed == 1 and cost or 0)
    if cur > 0 then reset = (P - e) + P elseif b > 0 then reset = P - e end
    if allowed == 0 and never == 0 then
      local room = limit - c - cost
      if room >= 0 and b > 0 then
        retry = math.max(1, P - math.floor(room * P / b) - e)
      else
        local e2 = 0
        if c > 0 then e2 = math.max(0, P - math.floor((limit - cost) * P / c)) end
        retry = (P - e) + e2
      end
    end
    st.a, st.b, st.c = a, b, c
  elseif kind == 1 then
    a, tok = refill(a, tok, limit, P)
    if never == 0 and tok >= cost then allowed = 1 end
    if allowed == 1 and want > 0 then
      cost = cost + math.max(0, math.min(want, math.floor(tok - cost)))
      st.cost = cost
    end
    local left = tok - (allowed == 1 and cost or 0)
    if left > 0 then remaining = math.floor(left) end
    local rate = limit / P
    reset = math.ceil((limit - left) / rate)
    if allowed == 0 and never == 0 then retry = math.max(1, math.ceil((cost - tok) / rate)) end
    st.a, st.tok = a, tok
  else
    local pid, pend = period(cal, now)
    if a ~= pid then a = pid; b = 0 end
    if never == 0 and b + cost <= limit then allowed = 1 end
    if allowed == 1 and want > 0 then
      cost = cost + math.min(want, limit - b - cost)
      st.cost = cost
    end
    local used = b + (allowed == 1 and cost or 0)
    remaining = math.max(0, limit - used)
    reset = math.max(0, pend - now)
    if allowed == 0 and never == 0 then retry = math.max(1, reset) end
    st.a, st.b, st.pend = a, b, pend
  end
  if allowed == 0 and out[1] == 1 then
    out[1] = 0
    out[2] = i
  end
  states[i] = st
  out[#out + 1] = allowed
  out[#out + 1] = never
  out[#out + 1] = remaining
  out[#out + 1] = reset
  out[#out + 1] = retry
  out[#out + 1] = cost
end
if charge and out[1] == 1 then
  for i = 1, n do
    local st = states[i]
    if st.kind == 0 then
      redis.call('SET', KEYS[i], state(st.a, st.b, st.c + st.cost, nil), 'PX', 2 * st.P)
    elseif st.kind == 1 then
      local tok = st.tok - st.cost
      -- A full bucket needs no state: past the time to refill, the key may go.
      redis.call('SET', KEYS[i], state(st.a, 0, 0, tok), 'PX', math.ceil((st.limit - tok) * st.P / st.limit) + 1000)
    else
      redis.call('SET', KEYS[i], state(st.a, st.b + st.cost, 0, nil), 'PX', st.pend + 86400000 - now)
    end
  end
  if mode == 2 then
    local note = {string.format('%d', now)}
    for i = 1, n do note[#note + 1] = string.format('%d', states[i].cost) end
    redis.call('SET', KEYS[n + 1], table.concat(note, ' '), 'PX', 900000)
  end
end
return out
)LUA";

// One counter's charge moved by `delta` (negative: a refund) as of `charged` (the
// server's ms when it was charged). A window is only ever refunded (a cluster request
// whose other slot refused it), in the window it was charged in or, once that is the
// previous one, there; a quota charged in a period that has ended is left alone, and a
// charge to a period the counter has not begun (what a replica spent while Redis was
// away, on a counter Redis had not seen or in a new day) begins it.
#define TAHUA_LUA_APPLY                                                                        \
  "local function apply(key, v, kind, limit, P, cal, charged, delta)\n"                       \
  "  local a, b, c, tok = parse(v)\n"                                                         \
  "  if kind == 0 then\n"                                                                     \
  "    local start = charged - (charged % P)\n"                                               \
  "    if delta < 0 and (a == start or a == start + P) then\n"                                \
  "      if a == start then c = math.max(0, c + delta) else b = math.max(0, b + delta) end\n" \
  "      redis.call('SET', key, state(a, b, c, nil), 'KEEPTTL')\n"                            \
  "    end\n"                                                                                 \
  "  elseif kind == 1 then\n"                                                                 \
  "    a, tok = refill(a, tok, limit, P)\n"                                                   \
  "    tok = math.min(limit, tok - delta)\n"                                                  \
  "    redis.call('SET', key, state(a, 0, 0, tok), 'PX', math.ceil((limit - tok) * P / limit) + 1000)\n" \
  "  elseif kind == 2 then\n"                                                                 \
  "    local pid, pend = period(cal, charged)\n"                                              \
  "    if a == pid then\n"                                                                    \
  "      redis.call('SET', key, state(a, math.max(0, b + delta), 0, nil), 'PX', math.max(1, pend + 86400000 - now))\n" \
  "    elseif delta > 0 and (a == nil or a < pid) then\n"                                   \
  "      redis.call('SET', key, state(pid, delta, 0, nil), 'PX', math.max(1, pend + 86400000 - now))\n" \
  "    end\n"                                                                                 \
  "  end\n"                                                                                   \
  "end\n"

// Calibrations, many at once. KEYS: counters charged before, then the call's marker (in
// the first counter's slot: AdjustmentCall in redis_limits.cpp). ARGV: six per counter: kind,
// limit, period_ms, calendar, charged_ms, delta (TAHUA_LUA_APPLY).
inline constexpr const char* kAdjust = TAHUA_LUA_PRELUDE TAHUA_LUA_STATE TAHUA_LUA_APPLY R"LUA(
local n = #KEYS - 1
-- The last key marks this call applied: a call sent again after its answer was lost
-- (Redis went away mid-call) is not applied twice.
if not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'PX', 900000) then return 0 end
local vals = redis.call('MGET', unpack(KEYS, 1, n))
for i = 1, n do
  local base = (i - 1) * 6
  apply(KEYS[i], vals[i], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]),
        tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]), tonumber(ARGV[base + 6]))
end
return n
)LUA";

// An admission whose answer was lost (the connection failed after it was sent): undone if
// it was applied, and kept from applying if it was not. KEYS: its counters, then its
// marker (kAdmit's mode 2). ARGV: four per counter: kind, limit, period_ms, calendar.
// The marker holds "<at_ms> <charged> ..." once the admission charged; after this call it
// holds "-", which an admission still on its way reads as "cancelled". Sent again after
// its own answer was lost, it finds "-" and does nothing.
inline constexpr const char* kUndoAdmit = TAHUA_LUA_PRELUDE TAHUA_LUA_STATE TAHUA_LUA_APPLY R"LUA(
local n = #KEYS - 1
local m = redis.call('GET', KEYS[#KEYS])
redis.call('SET', KEYS[#KEYS], '-', 'PX', 900000)
if not m or m == '-' then return 0 end
local charged = {}
for x in string.gmatch(m, '%S+') do charged[#charged + 1] = tonumber(x) end
if #charged ~= n + 1 then return 0 end
local vals = redis.call('MGET', unpack(KEYS, 1, n))
for i = 1, n do
  local base = (i - 1) * 4
  if charged[i + 1] > 0 then
    apply(KEYS[i], vals[i], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]),
          tonumber(ARGV[base + 4]), charged[1], -charged[i + 1])
  end
end
return n
)LUA";

// KEYS[1]: the replicas' heartbeat set. ARGV: this replica's id, how long a replica
// counts as alive (ms). Returns how many are alive (this one included).
inline constexpr const char* kHeartbeat = TAHUA_LUA_PRELUDE R"LUA(
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 4)
return redis.call('ZCARD', KEYS[1])
)LUA";

// Lock renewal and release, only by the owner that holds it. KEYS[1]: the lock;
// ARGV[1]: the owner; renewal: ARGV[2] the new TTL (ms). Returns 1 if it was held.
inline constexpr const char* kRenewLock = R"LUA(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  return 1
end
return 0
)LUA";

inline constexpr const char* kUnlock = R"LUA(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
)LUA";

// A value in a group with a byte bound (a tenant's stored responses). KEYS[1]: the value;
// KEYS[2..4]: the group's order (a sorted set by expiry time), sizes (a hash) and total
// (an integer), all with the group's hash tag. ARGV: value, TTL (ms), max bytes, now
// (unix ms). Values past their expiry leave the count (at most 128 per call), then the
// soonest to expire go while the group holds more than the bound. Returns how many went.
inline constexpr const char* kPutGrouped = R"LUA(
local key = KEYS[1]
local now = tonumber(ARGV[4])
local size = string.len(key) + string.len(ARGV[1])
local total = tonumber(redis.call('GET', KEYS[4]) or '0')
local old = redis.call('HGET', KEYS[3], key)
if old then total = redis.call('DECRBY', KEYS[4], old) end
redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), key)
redis.call('HSET', KEYS[3], key, size)
total = redis.call('INCRBY', KEYS[4], size)
local function forget(k)
  local s = redis.call('HGET', KEYS[3], k)
  if s then total = redis.call('DECRBY', KEYS[4], s) end
  redis.call('HDEL', KEYS[3], k)
  redis.call('ZREM', KEYS[2], k)
end
for _, k in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 128)) do forget(k) end
local max = tonumber(ARGV[3])
local evicted = 0
while total > max do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #first == 0 then break end
  forget(first[1])
  redis.call('DEL', first[1])
  evicted = evicted + 1
end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local keep = math.max((tonumber(last[2]) or now) - now, 0) + 60000
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], keep) end
return evicted
)LUA";

// Its erase: KEYS as kPutGrouped's. Returns how many values were deleted (0 or 1).
inline constexpr const char* kEraseGrouped = R"LUA(
local s = redis.call('HGET', KEYS[3], KEYS[1])
if s then redis.call('DECRBY', KEYS[4], s) end
redis.call('HDEL', KEYS[3], KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
return redis.call('DEL', KEYS[1])
)LUA";

#undef TAHUA_LUA_PRELUDE
#undef TAHUA_LUA_STATE

}  // namespace tahua::redis_scripts
