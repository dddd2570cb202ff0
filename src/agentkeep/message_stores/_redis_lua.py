"""The Lua scripts of the Redis backend (kept apart from the Python so each stays readable).

Every mutating operation of :class:`~agentkeep.message_stores.redis.RedisMessageStore` is one script, which
Redis runs start to finish: that is what makes appends, trims, expiry and compaction atomic across
processes. The key layout they work on is described in :mod:`agentkeep.message_stores.redis`.
"""

from __future__ import annotations

from .._db.redis import RedisScript
from .base import DEDUP_WINDOW

__all__ = [
    "APPEND",
    "COMPACT",
    "DELETE",
    "EXPIRE",
    "INDEX_TENANTS",
    "LIST",
    "MIGRATE",
    "PAGE",
    "READ",
    "RECORDS",
    "REINDEX",
    "REWRITE",
    "SETUP",
    "START_LAYOUT_4",
    "UPGRADE",
    "append_with",
]


# -- Lua ------------------------------------------------------------------------------------------
# KEYS of every conversation script: meta hash, log list, exclusion ranges, summaries hash, the
# ids of the newest DEDUP_WINDOW seqs; the scripts that keep the listing up to date add the
# bucket's index (conversation ids by their newest message's time) and expiry (conversation ids by
# deadline) sorted sets as KEYS[6] and KEYS[7], the bucket's layout marker as KEYS[8], and take the
# conversation id as an argument. All of them share the bucket's hash tag: one slot per script,
# which Redis Cluster requires (no script names a key it is not given).

_COUNTERS = """
-- A conversation's counters from its meta hash (head, last seq, epoch), checked: a damaged
-- field must fail the script, never make it loop or misnumber the log.
local function counters(meta, state)
  local head, last, epoch = tonumber(state[1]), tonumber(state[2]), tonumber(state[3] or 0)
  local function bad(n) return n == nil or n ~= n or n ~= math.floor(n) or n > 9007199254740991 end
  if bad(head) or bad(last) or bad(epoch) or head < 1 or last < head - 1 or epoch < 0 then
    error({err = 'AGENTKEEP_CORRUPT_META ' .. meta .. ': h=' .. tostring(state[1]) .. ' l=' ..
      tostring(state[2]) .. ' e=' .. tostring(state[3])})
  end
  return head, last, epoch
end
"""

_PRELUDE = (
    f"local WINDOW = {DEDUP_WINDOW}\n"
    + _COUNTERS
    + """
local function ranges(text)
  local out = {}
  if text then
    for a, b in string.gmatch(text, '(%d+)-(%d+)') do out[#out + 1] = {tonumber(a), tonumber(b)} end
  end
  return out
end

local function covered(rs, seq)
  local lo, hi = 1, #rs
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if seq < rs[mid][1] then hi = mid - 1 elseif seq > rs[mid][2] then lo = mid + 1 else return true end
  end
  return false
end

-- {seq, anchor, field} of every summary, by seq
local function summaries(key)
  local out = {}
  for _, field in ipairs(redis.call('HKEYS', key)) do
    local seq, anchor = string.match(field, '^(%d+):(%d+)$')
    out[#out + 1] = {tonumber(seq), tonumber(anchor), field}
  end
  table.sort(out, function(p, q) return p[1] < q[1] end)
  return out
end

-- the parts of [lo, hi] outside `skips` (ranges sorted by start), ascending
local function segments(lo, hi, skips)
  local out, cur = {}, lo
  for _, r in ipairs(skips) do
    if r[1] > hi then break end
    if r[2] >= cur then
      if r[1] > cur then out[#out + 1] = {cur, r[1] - 1} end
      cur = r[2] + 1
    end
  end
  if cur <= hi then out[#out + 1] = {cur, hi} end
  return out
end

-- the length-prefixed id an entry starts with (nil for a placeholder)
local function needle_at(entry, at)
  local size = string.byte(entry, at)
  if not size then return nil end
  if size == 255 then
    local high, low = string.byte(entry, at + 1, at + 2)
    if not low then return nil end
    return string.sub(entry, at, at + 2 + high * 256 + low)
  end
  return string.sub(entry, at, at + size)
end
"""
)

# Helpers of the listing index (used by the scripts that maintain or read it).
_INDEX = """
local CONVERSATION_KEYS = 5
local PURGE_BATCH, PURGE_GRACE = 16, 1000

-- the server's clock in milliseconds
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- a number as the integer argument Redis expects (tostring would round to 14 digits)
local function int(value)
  return string.format('%.0f', value)
end

-- the 8 time bytes of a message entry (after its length-prefixed id)
local function time_bytes(entry)
  local at = 2 + (string.byte(entry, 1) or 0)
  if at == 257 then
    local high, low = string.byte(entry, 2, 3)
    at = 4 + (high or 0) * 256 + (low or 0)
  end
  return string.sub(entry, at, at + 7)
end

-- 8 bytes big-endian signed as a number (exact within 2^53 microseconds, ~285 years of 1970)
local function time_value(bytes)
  local negative = string.byte(bytes, 1) >= 128
  local value = 0
  for k = 1, 8 do
    local b = string.byte(bytes, k)
    if negative then b = 255 - b end
    value = value * 256 + b
  end
  if negative then value = -value - 1 end
  return value
end

-- seq and time bytes of the newest message in the log (skipping summary placeholders), or nil
local function newest(log, head, last)
  local top = last - head
  local entry = redis.call('LINDEX', log, top)
  if entry and entry ~= '' then return last, time_bytes(entry) end
  while top > 0 do
    local low = math.max(0, top - 64)
    local chunk = redis.call('LRANGE', log, low, top - 1)
    for k = #chunk, 1, -1 do
      if chunk[k] ~= '' then return head + low + k - 1, time_bytes(chunk[k]) end
    end
    top = low
  end
  return nil
end

-- drop from the bucket's index and expiry set a few conversations whose deadline passed
local function purge_expired(index, expiry, now)
  local gone = redis.call(
    'ZRANGEBYSCORE', expiry, '-inf', '(' .. int(now - PURGE_GRACE), 'LIMIT', 0, PURGE_BATCH
  )
  if #gone > 0 then
    redis.call('ZREM', index, unpack(gone))
    redis.call('ZREM', expiry, unpack(gone))
  end
end

-- refuse (returning what is recorded) when the bucket's marker records a newer layout or record
-- format than the caller's; else record the caller's where the marker is missing or older
local function check_marker(marker, layout, format)
  local recorded = redis.call('HMGET', marker, 'layout', 'format')
  local l, f = tonumber(recorded[1]) or 0, tonumber(recorded[2]) or 0
  if l > tonumber(layout) or f > tonumber(format) then return recorded end
  if l < tonumber(layout) or f < tonumber(format) then
    redis.call('HSET', marker, 'layout', layout, 'format', format)
  end
  return nil
end
"""

# KEYS: the layout hash. ARGV: the layout, record format and bucket count of this agentkeep.
# Records them for a new prefix; returns the recorded layout, format, bucket count and whether
# the move to layout 4 is under way (each nil when not recorded).
SETUP = RedisScript("""
local found = redis.call('HMGET', KEYS[1], 'layout', 'format', 'buckets', 'migrating')
if not found[1] then
  redis.call('HSET', KEYS[1], 'layout', ARGV[1], 'format', ARGV[2], 'buckets', ARGV[3])
  return {ARGV[1], ARGV[2], ARGV[3], false}
end
-- an older record format is raised to this one (what is written from now on), so an older
-- agentkeep refuses the keys instead of misreading new records
local format = tonumber(found[2])
if format and format >= 1 and format < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'format', ARGV[2])
end
return found
""")

# The upgrade from layout 3. KEYS: the layout hash; ARGV: the bucket count. Only from layout 3:
# records layout 4 (from then on an agentkeep of layout 3 refuses the keys, its appends too),
# the bucket count and that conversations are being moved ("migrating"). Returns the layout and
# bucket count recorded.
START_LAYOUT_4 = RedisScript("""
if redis.call('HGET', KEYS[1], 'layout') == '3' then
  redis.call('HSET', KEYS[1], 'layout', '4', 'buckets', ARGV[1], 'migrating', '1')
end
return redis.call('HMGET', KEYS[1], 'layout', 'buckets')
""")

# Moves conversations from layout 3 to layout 4 (one server only: the keys span slots). KEYS: the
# layout-3 index and expiry set, then per conversation its five layout-3 keys, its five layout-4
# keys, its bucket's index and expiry set and its layout-3 tenant index (13 each); ARGV: the ids.
# A conversation whose layout-3 meta key exists (and that has no layout-4 one) has its keys
# renamed (TTLs kept) and its score and deadline copied into its bucket; every id leaves the
# layout-3 sets (which Redis deletes once empty). Returns how many were moved.
MIGRATE = RedisScript("""
local moved = 0
for k = 1, #ARGV do
  local base, member = 2 + 13 * (k - 1), ARGV[k]
  local score = redis.call('ZSCORE', KEYS[1], member)
  local deadline = redis.call('ZSCORE', KEYS[2], member)
  if redis.call('EXISTS', KEYS[base + 1]) == 1 and redis.call('EXISTS', KEYS[base + 6]) == 0 then
    for j = 1, 5 do
      if redis.call('EXISTS', KEYS[base + j]) == 1 then
        redis.call('RENAME', KEYS[base + j], KEYS[base + 5 + j])
      end
    end
    if score then redis.call('ZADD', KEYS[base + 11], score, member) end
    if deadline then redis.call('ZADD', KEYS[base + 12], deadline, member) end
    moved = moved + 1
  end
  redis.call('ZREM', KEYS[1], member)
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', KEYS[base + 13], member)
end
return moved
""")

_APPEND_BODY = """
local meta, log, excl, sums, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local index, expiry, marker = KEYS[6], KEYS[7], KEYS[8]
-- ARGV: max_messages (0: none), ttl in ms (0: none), '1' to look for the batch's ids among the
-- newest (the caller gave some) or '2' to look for its first id only (new ids: only a resend of
-- this very script after a dropped connection can have stored them), the conversation id, the
-- server time (ms) by which this must start (0: any time), the layout and record format the
-- caller writes, then the entries.
-- Returns the first seq, -k when the k-th entry's id is stored with other content, 0 when it
-- started too late (its caller has timed out: nothing is written), or the recorded layout and
-- format when a newer agentkeep has upgraded the keys since the caller checked them.
local max_messages, ttl, member = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[4]
local check, conflicts = ARGV[3] ~= '0', ARGV[3] == '1'
local start_by = tonumber(ARGV[5])
local FIRST = 8
local newer = check_marker(marker, ARGV[6], ARGV[7])
if newer then return newer end
local state = redis.call('HMGET', meta, 'h', 'l')
local head, last
if state[1] then
  head, last = counters(meta, state)
  if check then
    local base = last - redis.call('LLEN', recent) + 1
    local first = needle_at(ARGV[FIRST], 1)
    local at = redis.call('LPOS', recent, first, 'RANK', -1)
    if at and base + at >= head then
      -- a retry if the batch is stored as it is from there (ids, and bodies short of their
      -- 4-byte seals, which cover the time: a retry may have stamped its messages anew)
      local seq, n = base + at, #ARGV - FIRST + 1
      local stored = redis.call('LRANGE', log, seq - head, seq - head + n - 1)
      local same = #stored == n
      for k = 1, n do
        if not same then break end
        local mine, theirs = ARGV[FIRST + k - 1], stored[k]
        local id = needle_at(mine, 1)
        same = theirs ~= '' and needle_at(theirs, 1) == id
          and string.sub(theirs, #id + 9, -5) == string.sub(mine, #id + 9, -5)
      end
      if same then return seq end
      return -1
    end
    for k = FIRST + 1, conflicts and #ARGV or 0 do
      local other = redis.call('LPOS', recent, needle_at(ARGV[k], 1), 'RANK', -1)
      if other and base + other >= head then return -(k - FIRST + 1) end
    end
  end
end
-- a retry was answered above whenever it came: only a write must start in time
if start_by > 0 and clock_ms() > start_by then return 0 end
if not state[1] then
  redis.call('DEL', log, excl, sums, recent)  -- leftovers of a conversation that expired
  head, last = 1, 0
  redis.call('HSET', meta, 'h', 1, 'e', 0)
end
for i = FIRST, #ARGV, 1000 do redis.call('RPUSH', log, unpack(ARGV, i, math.min(i + 999, #ARGV))) end
local needles = {}
for i = math.max(FIRST, #ARGV - WINDOW + 1), #ARGV do needles[#needles + 1] = needle_at(ARGV[i], 1) end
redis.call('RPUSH', recent, unpack(needles))
redis.call('LTRIM', recent, -WINDOW, -1)
local first = last + 1
last = last + #ARGV - FIRST + 1
redis.call('HSET', meta, 'l', last)
if max_messages > 0 then
  local points = {}
  for _, s in ipairs(summaries(sums)) do
    if s[1] >= head then points[#points + 1] = s[1] end
  end
  local excess = last - head + 1 - #points - max_messages
  if excess > 0 then
    local cut = head + excess
    for _, p in ipairs(points) do
      if p < cut then cut = cut + 1 end
    end
    redis.call('LTRIM', log, cut - head, -1)
    redis.call('HSET', meta, 'h', cut)
  end
end
local now = clock_ms()
purge_expired(index, expiry, now)
local score = int(time_value(time_bytes(ARGV[#ARGV])))
redis.call('ZADD', index, score, member)
if ttl > 0 then
  local deadline = int(now + ttl)
  for k = 1, CONVERSATION_KEYS do redis.call('PEXPIREAT', KEYS[k], deadline) end
  redis.call('ZADD', expiry, deadline, member)
elseif not state[1] then
  redis.call('ZREM', expiry, member)  -- a new conversation without a deadline
end
return first
"""

APPEND = RedisScript(_PRELUDE + _INDEX + _APPEND_BODY)


def append_with(before: str, after: str, *, caller_args: int) -> RedisScript:
    """The append with a caller's Lua around it, in one script (one step). The caller's part has
    the last KEYS entry (``SKEY``) and the first ``caller_args`` ARGV entries (``SARGV``); the
    append has the rest, as :data:`APPEND` takes them. ``before`` runs first and may ``return``
    (nothing is written then); ``after`` runs once the append wrote its batch (``first``: its
    first seq). Returns ``{'ok', first}``, ``{'append', reply}`` when the append wrote nothing
    (its reply as :data:`APPEND` gives it), or what ``before`` returned."""
    head = f"""
local SKEY = KEYS[#KEYS]
local SARGV = {{unpack(ARGV, 1, {caller_args})}}
"""
    call = f"""
local akeys, aargv = {{}}, {{}}
for i = 1, #KEYS - 1 do akeys[i] = KEYS[i] end
for i = {caller_args} + 1, #ARGV do aargv[#aargv + 1] = ARGV[i] end
local first = append(akeys, aargv)
if type(first) == 'table' or first <= 0 then return {{'append', first}} end
"""
    return RedisScript(
        _PRELUDE
        + _INDEX
        + "local function append(KEYS, ARGV)\n"
        + _APPEND_BODY
        + "end\n"
        + head
        + before
        + call
        + after
        + "return {'ok', first}\n"
    )


READ = RedisScript(
    _PRELUDE
    + """
local meta, log, excl, sums = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- ARGV: after (0: from the start), how many (-1: all), 1 for the raw log / 0 for the view, and
-- (optional, 0: never) from how many entries a whole read of a log that is its own view is
-- answered {epoch, last, 'whole', text, head, the last entry} for the caller to LRANGE itself
local after, want, raw = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local direct = tonumber(ARGV[4] or '0')
local state = redis.call('HMGET', meta, 'h', 'l', 'e')
if not state[1] then return {0, 0, {}, ''} end
local head, last, epoch = counters(meta, state)
local text = redis.call('GET', excl) or ''
if want == 0 then return {epoch, last, {}, text} end
if direct > 0 and want < 0 and after == 0 and last - head + 1 >= direct and (raw or text == '')
    and redis.call('HLEN', sums) == 0 then
  return {epoch, last, 'whole', text, head, redis.call('LINDEX', log, -1) or ''}
end
local excluded = ranges(text)
local skips, active = {}, {}
if not raw then
  for _, r in ipairs(excluded) do skips[#skips + 1] = r end
end
for _, s in ipairs(summaries(sums)) do
  skips[#skips + 1] = {s[1], s[1]}
  if not raw and s[1] > after and not covered(excluded, s[1]) then active[#active + 1] = s end
end
table.sort(skips, function(p, q) return p[1] < q[1] end)
table.sort(active, function(p, q)
  if p[2] ~= q[2] then return p[2] < q[2] end
  return p[1] < q[1]
end)
-- the view as pieces: {0, first seq, last seq} for messages, {1, summary} for a summary, which
-- goes just before the first message at or after its anchor
local pieces, j = {}, 1
for _, seg in ipairs(segments(math.max(head, after + 1), last, skips)) do
  local a, b = seg[1], seg[2]
  while a <= b do
    while j <= #active and active[j][2] <= a do pieces[#pieces + 1] = {1, active[j]}; j = j + 1 end
    if j <= #active and active[j][2] <= b then
      pieces[#pieces + 1] = {0, a, active[j][2] - 1}
      a = active[j][2]
    else
      pieces[#pieces + 1] = {0, a, b}
      a = b + 1
    end
  end
end
while j <= #active do pieces[#pieces + 1] = {1, active[j]}; j = j + 1 end
local first = 1
if want > 0 then
  first = #pieces + 1
  while first > 1 and want > 0 do
    local p = pieces[first - 1]
    local size = 1
    if p[1] == 0 then
      size = p[3] - p[2] + 1
      if size > want then p[2] = p[3] - want + 1; size = want end
    end
    want = want - size
    first = first - 1
  end
end
local out = {}
for i = first, #pieces do
  local p = pieces[i]
  if p[1] == 0 then
    out[#out + 1] = {0, p[2], redis.call('LRANGE', log, p[2] - head, p[3] - head)}
  else
    out[#out + 1] = {1, p[2][1], redis.call('HGET', sums, p[2][3]) or ''}
  end
end
return {epoch, last, out, text}
"""
)

COMPACT = RedisScript(
    _PRELUDE
    + _INDEX
    + """
local meta, log, excl, sums, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local expiry = KEYS[7]
-- ARGV: the conversation id, the excluded needles (count first), the summaries (count first)
local member = ARGV[1]
local i = 2
local excluded, new = {}, {}
for k = 1, tonumber(ARGV[i]) do excluded[k] = ARGV[i + k] end
i = i + #excluded + 1
for k = 1, tonumber(ARGV[i]) do
  local count = tonumber(ARGV[i + 3])
  local s = {needle = ARGV[i + 1], record = ARGV[i + 2], replaces = {}}
  for q = 1, count do s.replaces[q] = ARGV[i + 3 + q] end
  new[k] = s
  i = i + 3 + count
end
local state = redis.call('HMGET', meta, 'h', 'l', 'e')
if not state[1] then
  if #new > 0 then return {-1, 0} end
  return {0, 0}
end
local head, last, epoch = counters(meta, state)
-- wanted[needle]: false while not found, then {seq, anchor}
local wanted, missing = {}, 0
local function want(n)
  if wanted[n] == nil then wanted[n] = false; missing = missing + 1 end
end
for _, n in ipairs(excluded) do want(n) end
for _, s in ipairs(new) do
  for _, n in ipairs(s.replaces) do want(n) end
end
-- what a summary record holds after its entry: its replaced ids (a retry repeats them)
local function replaced_part(record)
  local a, b, c, d = string.byte(record, 1, 4)
  if not d then return record end
  return string.sub(record, 5 + ((a * 256 + b) * 256 + c) * 256 + d)
end
local stored, recorded = redis.call('HGETALL', sums), {}
for k = 1, #stored, 2 do
  local seq, anchor = string.match(stored[k], '^(%d+):(%d+)$')
  local n = needle_at(stored[k + 1], 5)
  if n then
    recorded[n] = replaced_part(stored[k + 1])
    if wanted[n] == false then wanted[n] = {tonumber(seq), tonumber(anchor)}; missing = missing - 1 end
  end
end
local xr = ranges(redis.call('GET', excl))
local function scan(a, b)
  while a <= b and missing > 0 do
    local e = math.min(b, a + 499)
    for k, entry in ipairs(redis.call('LRANGE', log, a - head, e - head)) do
      local n = needle_at(entry, 1)
      if n and wanted[n] == false then wanted[n] = {a + k - 1, a + k - 1}; missing = missing - 1 end
    end
    a = e + 1
  end
end
if missing > 0 then
  -- compactions usually exclude what follows the previous one: start at the first included seq
  local start = head
  for _, r in ipairs(xr) do
    if r[1] <= start and r[2] >= start then start = r[2] + 1 end
  end
  scan(start, last)
  scan(head, math.min(start - 1, last))
end
local anchors = {}
for k, s in ipairs(new) do
  for _, n in ipairs(s.replaces) do
    local hit = wanted[n]
    if hit and (anchors[k] == nil or hit[2] < anchors[k]) then anchors[k] = hit[2] end
  end
  if anchors[k] == nil then return {-2, k} end
end
-- a summary may not take the id of a summary replacing other messages, or of a stored message
-- (looked for among the ids this compaction names and the newest WINDOW entries still stored)
local base = last - redis.call('LLEN', recent) + 1
for k, s in ipairs(new) do
  local prior = recorded[s.needle]
  if prior ~= nil then
    if prior ~= replaced_part(s.record) then return {-3, k} end
  else
    if wanted[s.needle] then return {-3, k} end
    local at = redis.call('LPOS', recent, s.needle, 'RANK', -1)
    if at and base + at >= head then return {-3, k} end
  end
end
local points = {}
for _, n in ipairs(excluded) do
  local hit = wanted[n]
  if hit then points[#points + 1] = {hit[1], hit[1]} end
end
if #points > 0 then
  for _, r in ipairs(xr) do points[#points + 1] = r end
  table.sort(points, function(p, q) return p[1] < q[1] end)
  local merged = {}
  for _, r in ipairs(points) do
    local top = merged[#merged]
    if top and r[1] <= top[2] + 1 then
      if r[2] > top[2] then top[2] = r[2] end
    else
      merged[#merged + 1] = {r[1], r[2]}
    end
  end
  local parts = {}
  for k, r in ipairs(merged) do parts[k] = r[1] .. '-' .. r[2] end
  redis.call('SET', excl, table.concat(parts, ','))
end
for k, s in ipairs(new) do
  if recorded[s.needle] == nil then  -- else: recorded before, this is a retry
    last = last + 1
    redis.call('RPUSH', log, '')
    redis.call('RPUSH', recent, '')
    redis.call('LTRIM', recent, -WINDOW, -1)
    redis.call('HSET', sums, last .. ':' .. anchors[k], s.record)
    recorded[s.needle] = replaced_part(s.record)
  end
end
epoch = epoch + 1
redis.call('HSET', meta, 'l', last, 'e', epoch)
-- keys created here get the conversation's deadline
local deadline = redis.call('ZSCORE', expiry, member)
if deadline then
  for k = 1, CONVERSATION_KEYS do redis.call('PEXPIREAT', KEYS[k], deadline) end
else
  local ttl = redis.call('PTTL', meta)
  if ttl > 0 then
    for k = 1, CONVERSATION_KEYS do redis.call('PEXPIRE', KEYS[k], ttl) end
  end
end
return {0, epoch}
"""
)

# Records as stored, for key rotation. KEYS: meta, log, excluded, summaries (as READ).
# ARGV: after, limit (> 0). Returns {seq, kind, data} per record in seq order, at most `limit`:
# kind 0 is a log entry (id, time, body), kind 1 a summary's hash value (4-byte entry length,
# entry, replaced ids). The log is read a window of `limit` seqs at a time from the first seq after
# `after` (a summary's placeholder stands for its summary), so the cost follows `limit`, not the
# conversation; the summaries are few and read whole (HGETALL), which also covers those a
# max_messages trim left before the log's head.
RECORDS = RedisScript(
    _COUNTERS
    + """
local meta, log, sums = KEYS[1], KEYS[2], KEYS[4]
local after, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local state = redis.call('HMGET', meta, 'h', 'l')
if not state[1] then return {} end
local head, last = counters(meta, state)
local by_seq, early = {}, {}
local stored = redis.call('HGETALL', sums)
for k = 1, #stored, 2 do
  local seq = tonumber(string.match(stored[k], '^(%d+):'))
  if seq and seq > after then
    by_seq[seq] = stored[k + 1]
    if seq < head then early[#early + 1] = seq end
  end
end
table.sort(early)
local out = {}
for _, seq in ipairs(early) do
  if #out >= limit then return out end
  out[#out + 1] = {seq, 1, by_seq[seq]}
end
local a = math.max(head, after + 1)
while a <= last and #out < limit do
  local b = math.min(last, a + limit - #out - 1)
  for k, entry in ipairs(redis.call('LRANGE', log, a - head, b - head)) do
    local seq = a + k - 1
    if entry ~= '' then
      out[#out + 1] = {seq, 0, entry}
    elseif by_seq[seq] then
      out[#out + 1] = {seq, 1, by_seq[seq]}
    end
  end
  a = b + 1
end
return out
"""
)

# Replaces records' bodies if they are still stored as read (key rotation). KEYS: the
# conversation's five keys, then the bucket's index, expiry set and layout marker. ARGV: the
# server time (ms) by which this must start (0: any time), the layout and record format the
# caller writes, then per record its seq, its entry as read and its new entry (both built as
# APPEND's entries are). A log entry
# is replaced in place (LSET), a summary's hash value keeps its replaced ids (HSET); both keep
# the key's TTL, and nothing else changes. A record that already holds the new entry counts as
# replaced (the client may resend a script after a dropped connection). Returns how many were
# replaced, -1 when it started too late (nothing is written), or the recorded layout and format
# when a newer agentkeep has upgraded the keys since the caller checked them.
REWRITE = RedisScript(
    _PRELUDE
    + _INDEX
    + """
local meta, log, sums = KEYS[1], KEYS[2], KEYS[4]
local start_by = tonumber(ARGV[1])
local FIRST = 4
if start_by > 0 and clock_ms() > start_by then return -1 end
local newer = check_marker(KEYS[8], ARGV[2], ARGV[3])
if newer then return newer end
local state = redis.call('HMGET', meta, 'h', 'l')
if not state[1] then return 0 end
local head, last = counters(meta, state)
local fields  -- summary field by seq, read when a change is not in the log
local function size_of(value)
  local b1, b2, b3, b4 = string.byte(value, 1, 4)
  if not b4 then return nil end
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end
local function sized(entry)
  local n = #entry
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256) .. entry
end
local replaced = 0
for i = FIRST, #ARGV - 2, 3 do
  local seq, old, new = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  local current = false
  if seq >= head and seq <= last then current = redis.call('LINDEX', log, seq - head) end
  if current == old then
    redis.call('LSET', log, seq - head, new)
    replaced = replaced + 1
  elseif current == new then
    replaced = replaced + 1
  elseif not current or current == '' then  -- not in the log, or a summary's placeholder
    if not fields then
      fields = {}
      for _, s in ipairs(summaries(sums)) do fields[s[1]] = s[3] end
    end
    local field = fields[seq]
    local value = field and redis.call('HGET', sums, field)
    local size = value and size_of(value)
    if size then
      local entry = string.sub(value, 5, 4 + size)
      if entry == old then
        redis.call('HSET', sums, field, sized(new) .. string.sub(value, 5 + size))
        replaced = replaced + 1
      elseif entry == new then
        replaced = replaced + 1
      end
    end
  end
end
return replaced
"""
)

DELETE = RedisScript(
    _INDEX
    + """
-- ARGV: the conversation id
local found = redis.call('EXISTS', KEYS[1])
redis.call('DEL', unpack(KEYS, 1, CONVERSATION_KEYS))
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
return found
"""
)

EXPIRE = RedisScript(
    _INDEX
    + """
-- ARGV: ttl in ms (-1: never), the conversation id
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ttl, member = tonumber(ARGV[1]), ARGV[2]
if ttl < 0 then
  for k = 1, CONVERSATION_KEYS do redis.call('PERSIST', KEYS[k]) end
  redis.call('ZREM', KEYS[7], member)
elseif ttl == 0 then
  redis.call('DEL', unpack(KEYS, 1, CONVERSATION_KEYS))
  redis.call('ZREM', KEYS[6], member)
  redis.call('ZREM', KEYS[7], member)
else
  local deadline = int(clock_ms() + ttl)
  for k = 1, CONVERSATION_KEYS do redis.call('PEXPIREAT', KEYS[k], deadline) end
  redis.call('ZADD', KEYS[7], deadline, member)
end
return 1
"""
)

# KEYS: a bucket's index and expiry set, then meta, log and summaries of each conversation (of
# that bucket); ARGV: their ids.
# Per conversation: 0 if it is gone (expired or deleted: then it leaves the indexes), else one string
# (fewer reply elements to parse): "<last seq> <raw messages stored> <seq of the newest message, 0
# if none> " and that message's 8 time bytes.
LIST = RedisScript(
    _COUNTERS
    + _INDEX
    + """
local out = {}
for k = 1, #ARGV do
  local meta, log, sums = KEYS[3 * k], KEYS[3 * k + 1], KEYS[3 * k + 2]
  local state = redis.call('HMGET', meta, 'h', 'l')
  if not state[1] then
    redis.call('ZREM', KEYS[1], ARGV[k])
    redis.call('ZREM', KEYS[2], ARGV[k])
    out[k] = 0
  else
    local head, last = counters(meta, state)
    local count = last - head + 1
    if head == 1 then
      count = count - redis.call('HLEN', sums)
    else
      for _, field in ipairs(redis.call('HKEYS', sums)) do
        if (tonumber(string.match(field, '^(%d+):')) or 0) >= head then count = count - 1 end
      end
    end
    local seq, stamp = newest(log, head, last)
    out[k] = last .. ' ' .. count .. ' ' .. (seq or 0) .. ' ' .. (stamp or '')
  end
end
return out
"""
)

# Indexes conversations written with key layout 1 (which had no index). KEYS: index, expiry,
# then meta and log of each conversation; ARGV: their ids. Returns how many were indexed.
REINDEX = RedisScript(
    _COUNTERS
    + _INDEX
    + """
local now, done = clock_ms(), 0
for k = 1, #ARGV do
  local meta, log = KEYS[2 * k + 1], KEYS[2 * k + 2]
  local state = redis.call('HMGET', meta, 'h', 'l')
  if state[1] then
    local head, last = counters(meta, state)
    local _, stamp = newest(log, head, last)
    -- a bad time is indexed too: listing reports it rather than skipping the conversation
    local score = (stamp and #stamp == 8) and time_value(stamp) or 0
    redis.call('ZADD', KEYS[1], int(score), ARGV[k])
    local ttl = redis.call('PTTL', meta)
    if ttl > 0 then redis.call('ZADD', KEYS[2], int(now + ttl), ARGV[k]) end
    done = done + 1
  end
end
return done
"""
)

# KEYS: the layout hash; ARGV: the layout version found, the new one. Moves the marker on only
# from the version that was found (a concurrent upgrade is not undone).
UPGRADE = RedisScript("""
if redis.call('HGET', KEYS[1], 'layout') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'layout', ARGV[2])
end
return redis.call('HGET', KEYS[1], 'layout')
""")


# One page of an index, read by position. KEYS: the index. ARGV: how many, then optionally a
# position (a score as Redis formats it, a member, and 'at' or 'group'): the members that sort
# before it in the index's ascending (score, member) order ('group': before every member of that
# score). Returns {member, score, ...} ascending: the `count` members just before the position
# (all members when there are fewer), extended down to the first member of the lowest score's
# group when that score is not an exact integer (beyond 2^53 microseconds, where neighbouring times
# share a double): the caller orders such a group by the times in the entries.
PAGE = RedisScript("""
local index, count = KEYS[1], tonumber(ARGV[1])
local EXACT = 9007199254740992
-- a < b by bytes (Lua's own string comparison follows the server's locale)
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local top
if ARGV[2] then
  local score, member = ARGV[2], ARGV[3]
  local below = redis.call('ZCOUNT', index, '-inf', '(' .. score)
  local same = redis.call('ZCOUNT', index, score, score)
  if ARGV[4] == 'group' then
    top = below + same
  else  -- members of one score sort by their bytes: find the first not before `member`
    local lo, hi = below, below + same
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if before(redis.call('ZRANGE', index, mid, mid)[1], member) then lo = mid + 1 else hi = mid end
    end
    top = lo
  end
else
  top = redis.call('ZCARD', index)
end
if top <= 0 then return {} end
local low = math.max(0, top - count)
if low > 0 then
  local edge = redis.call('ZRANGE', index, low, low, 'WITHSCORES')
  if math.abs(tonumber(edge[2])) >= EXACT then low = redis.call('ZCOUNT', index, '-inf', '(' .. edge[2]) end
end
return redis.call('ZRANGE', index, low, top - 1, 'WITHSCORES')
""")

# Fills tenant indexes from the prefix's index (the upgrade from layout 2). KEYS: the index, then
# the tenant index of each id; ARGV: the ids. Each id still in the index gets its score there now
# (so a batch never writes a score older than the index's). Returns how many were indexed.
INDEX_TENANTS = RedisScript("""
local done = 0
for k = 1, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[k])
  if score then
    redis.call('ZADD', KEYS[k + 1], score, ARGV[k])
    done = done + 1
  end
end
return done
""")
