// The Lua scripts of several regions (regions/region_link.h, and the store's record
// writes when a region is set), each one atomic on its server.
//
// Records: every record of a replicated namespace has a meta entry in
// tahua:region:meta:<ns>, "<hlc> <origin region> <deleted 0|1> <sha1 of the JSON | ->",
// the hybrid-logical-clock time of its last write. The store writes a record and its
// entry in one script (kWrite), so the time is the write's; a record written past the
// store (a hand-written HSET) is found by the link comparing each record with its entry
// (kDetect) and gets the time it was found. A peer's newer entry replaces ours
// (kApply); an older one is ignored: last writer wins, ties by region name. Deletions stay
// as tombstones, so a stale copy cannot bring a record back.
//
// The clock (tahua:region:hlc, "<ms> <logical>") is the region's Redis: TIME, moved past
// every timestamp received (the HLC receive rule), so a write made after one seen from a
// peer always carries a later time, whatever the two servers' clocks say.
//
// Quotas: a quota counter (limits: "<period> <used> 0 -") holds this region's use plus
// the peers'; tahua:region:q:<counter> holds each peer's last reported use
// ("<period> <used>" by region). Admission is unchanged: it reads one counter, locally.
#pragma once

namespace tahua::region_scripts {

#define TAHUA_REGION_HLC                                                                     \
  "local function hlc_parse(s)\n"                                                          \
  "  local pt, l = string.match(s or '', '^(%d+)[ .](%d+)$')\n"                            \
  "  return tonumber(pt) or 0, tonumber(l) or 0\n"                                         \
  "end\n"                                                                                  \
  "local function hlc_now(key)\n"                                                          \
  "  local t = redis.call('TIME')\n"                                                       \
  "  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"              \
  "  local pt, l = hlc_parse(redis.call('GET', key))\n"                                    \
  "  if now > pt then pt, l = now, 0 else l = l + 1 end\n"                                 \
  "  redis.call('SET', key, string.format('%d %d', pt, l))\n"                              \
  "  return string.format('%013d.%06d', pt, l)\n"                                          \
  "end\n"                                                                                  \
  "local function hlc_seen(key, ts)\n"                                                     \
  "  local rpt, rl = hlc_parse(ts)\n"                                                      \
  "  local pt, l = hlc_parse(redis.call('GET', key))\n"                                    \
  "  if rpt > pt or (rpt == pt and rl > l) then redis.call('SET', key, string.format('%d %d', rpt, rl)) end\n" \
  "end\n"                                                                                  \
  "local function meta_parse(e)\n"                                                         \
  "  if not e then return nil end\n"                                                       \
  "  local ts, origin, del, sha = string.match(e, '^(%S+) (%S+) ([01]) (%S+)$')\n"         \
  "  if not ts then return nil end\n"                                                      \
  "  return {ts = ts, origin = origin, del = del == '1', sha = sha}\n"                     \
  "end\n"                                                                                  \
  "local function newer(a, b)\n"                                                           \
  "  if not b then return true end\n"                                                      \
  "  if a.ts ~= b.ts then return a.ts > b.ts end\n"                                        \
  "  return a.origin > b.origin\n"                                                         \
  "end\n"                                                                                  \
  "-- A record whose meta does not describe it was written here since: it gets a time now.\n" \
  "local function detect_one(recs, meta, clock, region, id, json, e)\n"                    \
  "  local m = meta_parse(e)\n"                                                            \
  "  if json then\n"                                                                       \
  "    local sha = redis.sha1hex(json)\n"                                                  \
  "    if m and not m.del and m.sha == sha then return m end\n"                            \
  "    local ne = hlc_now(clock) .. ' ' .. region .. ' 0 ' .. sha\n"                       \
  "    redis.call('HSET', meta, id, ne)\n"                                                 \
  "    return meta_parse(ne)\n"                                                            \
  "  end\n"                                                                                \
  "  if m and not m.del then\n"                                                            \
  "    local ne = hlc_now(clock) .. ' ' .. region .. ' 1 -'\n"                             \
  "    redis.call('HSET', meta, id, ne)\n"                                                 \
  "    return meta_parse(ne)\n"                                                            \
  "  end\n"                                                                                \
  "  return m\n"                                                                           \
  "end\n"

// Every script that changes a namespace's records or entries also increments its version
// (tahua:region:ver:<ns>, the KEYS after the clock), so the link reads the entries again
// only when something changed.
//
// KEYS: records hash, meta hash, clock, version. ARGV: this region, the id, the JSON
// ("" for a deletion), deleted (0|1). The store's write of one record with its time.
inline constexpr const char* kWrite = TAHUA_REGION_HLC R"LUA(
redis.call('INCR', KEYS[4])
if ARGV[4] == '1' then
  redis.call('HDEL', KEYS[1], ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[2], hlc_now(KEYS[3]) .. ' ' .. ARGV[1] .. ' 1 -')
else
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[2], hlc_now(KEYS[3]) .. ' ' .. ARGV[1] .. ' 0 ' .. redis.sha1hex(ARGV[3]))
end
return 1
)LUA";

// KEYS: records hash, meta hash, clock, version. ARGV: this region. Gives every record written
// here since the last run (or deleted) a meta entry with a new time. Returns how many.
inline constexpr const char* kDetect = TAHUA_REGION_HLC R"LUA(
local recs = redis.call('HGETALL', KEYS[1])
local entries = redis.call('HGETALL', KEYS[2])
local meta, seen, changed = {}, {}, 0
for i = 1, #entries, 2 do meta[entries[i]] = entries[i + 1] end
local function count(before, after)
  local b = meta_parse(before)
  if after and (b == nil or b.ts ~= after.ts) then changed = changed + 1 end
end
for i = 1, #recs, 2 do
  local id = recs[i]
  seen[id] = true
  count(meta[id], detect_one(KEYS[1], KEYS[2], KEYS[3], ARGV[1], id, recs[i + 1], meta[id]))
end
for id, e in pairs(meta) do
  if not seen[id] then count(e, detect_one(KEYS[1], KEYS[2], KEYS[3], ARGV[1], id, nil, e)) end
end
if changed > 0 then redis.call('INCR', KEYS[4]) end
return changed
)LUA";

// KEYS: records hash, meta hash, clock, version. ARGV: the namespace, this region, then three per
// record: id, the sender's meta entry, the JSON ("" for a deletion). Each is applied when
// newer than ours (ours first brought up to date: a write here that the link has not seen
// yet competes with its real time); changed namespaces are published on tahua:changes
// like any write, so every replica's mirror follows. Returns how many were applied.
inline constexpr const char* kApply = TAHUA_REGION_HLC R"LUA(
local applied = 0
for i = 3, #ARGV, 3 do
  local id, e, json = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local theirs = meta_parse(e)
  if theirs then
    local current = redis.call('HGET', KEYS[1], id)
    local ours = detect_one(KEYS[1], KEYS[2], KEYS[3], ARGV[2], id, current or nil, redis.call('HGET', KEYS[2], id))
    if newer(theirs, ours) then
      hlc_seen(KEYS[3], theirs.ts)
      if theirs.del then redis.call('HDEL', KEYS[1], id) else redis.call('HSET', KEYS[1], id, json) end
      redis.call('HSET', KEYS[2], id, e)
      applied = applied + 1
    end
  end
end
if applied > 0 then
  redis.call('INCR', KEYS[4])
  redis.call('PUBLISH', 'tahua:changes', ARGV[1])
end
return applied
)LUA";

// KEYS: pairs (quota counter, its peers' hash). ARGV: this region. Returns two numbers per
// pair: the counter's period (-1: no counter) and this region's own use in it (the
// counter less what the peers reported for that period).
inline constexpr const char* kOwnUsage = R"LUA(
local out = {}
for i = 1, #KEYS, 2 do
  local v = redis.call('GET', KEYS[i])
  local a, b = string.match(v or '', '^(%S+) (%S+) ')
  if not a then
    out[#out + 1] = -1
    out[#out + 1] = 0
  else
    a, b = tonumber(a), tonumber(b)
    local peers = redis.call('HGETALL', KEYS[i + 1])
    local others = 0
    for j = 1, #peers, 2 do
      local p, u = string.match(peers[j + 1], '^(%S+) (%S+)$')
      if peers[j] ~= ARGV[1] and tonumber(p) == a then others = others + tonumber(u) end
    end
    out[#out + 1] = a
    out[#out + 1] = math.max(0, b - others)
  end
end
return out
)LUA";

// KEYS: pairs (quota counter, its peers' hash). ARGV: the sending region, then three per
// pair: period, its use in it, calendar (0 day, 1 month). A report of the current period
// moves the counter by the difference to that region's previous report; a counter of an
// older period (or none) starts the period with what the peers reported for it. Returns
// how many counters moved.
inline constexpr const char* kApplyUsage = R"LUA(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local moved = 0
for i = 1, #KEYS, 2 do
  local base = 1 + (i - 1) / 2 * 3
  local p, u, cal = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local v = redis.call('GET', KEYS[i])
  local a, b = string.match(v or '', '^(%S+) (%S+) ')
  a, b = tonumber(a), tonumber(b)
  -- Keep what is reported for a period no older than the counter's; an older report is stale.
  if a == nil or p >= a then
    local old = 0
    local prev = redis.call('HGET', KEYS[i + 1], ARGV[1])
    local pp, pu = string.match(prev or '', '^(%S+) (%S+)$')
    if tonumber(pp) == p then old = tonumber(pu) end
    if a ~= p then
      -- A new period here: this region had no use in it yet; the peers' reports of it count.
      a, b, old = p, 0, 0
      local peers = redis.call('HGETALL', KEYS[i + 1])
      for j = 1, #peers, 2 do
        local q, w = string.match(peers[j + 1], '^(%S+) (%S+)$')
        if peers[j] ~= ARGV[1] and tonumber(q) == p then b = b + tonumber(w) end
      end
    end
    b = math.max(0, b + u - old)
    -- Expires a day after the period ends, as the admission script's own counters do.
    local days = cal == 1 and 32 or 2
    redis.call('SET', KEYS[i], string.format('%d %d 0 -', a, b), 'PX', days * 86400000)
    redis.call('HSET', KEYS[i + 1], ARGV[1], string.format('%d %d', p, u))
    redis.call('PEXPIRE', KEYS[i + 1], days * 86400000)
    moved = moved + 1
  end
end
return moved
)LUA";

// KEYS: the lock. ARGV: owner, ttl ms. Takes it when free, renews it when ours.
inline constexpr const char* kHold = R"LUA(
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
  return 1
end
return 0
)LUA";

}  // namespace tahua::region_scripts
