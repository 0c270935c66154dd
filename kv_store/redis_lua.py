"""Lua scripts that change refcounts, leases and context records atomically in Redis.

Each script runs as one atomic step on the server, so two agents acquiring and
releasing the same pages can't interleave half-way through a page list, and a
holder killed mid-call either took its references or didn't.

Key layout under the prefix ``P`` (``"<namespace>:"``):

``P ctx:<cid>``    hash — the :class:`ContextRecord` fields, plus ``deleted`` ("1"
                   while a deleted context is still held) and ``gen`` (random per
                   creation, so clients can cache the immutable record)
``P hl:<cid>``     hash — holder id -> lease expiry (ms, Redis server clock)
``P leases``       zset — JSON ``[cid, holder]`` -> expiry ms; what the reaper scans
``P pg:<page>``    hash — ``rc`` (holder refs) and ``ctx`` (contexts listing the page)
``P blobs:<cid>``  hash — blob name -> :class:`BlobMeta` JSON
``P doc:<cid>``    string — the document text, the durable source a restarted store re-prefills from
``P contexts``     set — live context ids
``P stats``        hash — ``negative_clamps`` (must stay 0)

Scripts build key names from ARGV[1] (the prefix), which is fine on a single
Redis server or a replicated primary but not on Redis Cluster. Lease times use
the server's ``TIME`` so clients with skewed clocks agree on expiry (allowed in
scripts since Redis 5's effect replication).
"""

from __future__ import annotations

__all__ = ["ACQUIRE", "RENEW", "RELEASE", "REAP", "CREATE", "DELETE", "CLAIM_FREE", "CLAIM_EVICT",
           "PUT_BLOB_META", "GET_BLOB_META", "PUT_DOC", "GET_DOC", "CONTENT_FIELDS"]

#: Fields compared when a create repeats an existing id (idempotent iff equal).
CONTENT_FIELDS = ("tenant", "model_id", "dtype", "page_ids", "token_spans", "num_tokens")

_PRELUDE = r"""
local P = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Release one lease member; returns released(0/1), context_removed(0/1), freeable pages.
local function release_lease(member)
  if redis.call('ZREM', P .. 'leases', member) == 0 then return 0, 0, {} end
  local cid = cjson.decode(member)[1]
  local holder = cjson.decode(member)[2]
  local ckey = P .. 'ctx:' .. cid
  local hkey = P .. 'hl:' .. cid
  redis.call('HDEL', hkey, holder)
  local uniq = redis.call('HGET', ckey, 'uniq')
  local freeable = {}
  if not uniq then return 1, 0, freeable end
  for _, page in ipairs(cjson.decode(uniq)) do
    local pk = P .. 'pg:' .. page
    local rc = redis.call('HINCRBY', pk, 'rc', -1)
    if rc < 0 then
      -- Only reachable if bookkeeping was corrupted from outside; never store a negative count.
      redis.call('HSET', pk, 'rc', 0)
      redis.call('HINCRBY', P .. 'stats', 'negative_clamps', 1)
      rc = 0
    end
    if rc == 0 and tonumber(redis.call('HGET', pk, 'ctx') or '0') <= 0 then
      table.insert(freeable, page)
    end
  end
  if redis.call('HLEN', hkey) == 0 and redis.call('HGET', ckey, 'deleted') == '1' then
    redis.call('DEL', ckey, hkey, P .. 'blobs:' .. cid, P .. 'doc:' .. cid)
    return 1, 1, freeable
  end
  return 1, 0, freeable
end
local function live_record(cid, tenant)
  local ckey = P .. 'ctx:' .. cid
  local v = redis.call('HMGET', ckey, 'tenant', 'deleted')
  if not v[1] or v[2] == '1' or (tenant ~= '' and v[1] ~= tenant) then return nil end
  return ckey
end
"""

# ARGV: prefix, cid, tenant, member, holder, ttl_ms, cached gen ('' = none)
#   -> {0} not found | {1, new(0/1), gen} when the caller's cached record is current
#                    | {1, new(0/1), gen, flat fields} otherwise
ACQUIRE = _PRELUDE + r"""
local ckey = live_record(ARGV[2], ARGV[3])
if not ckey then return {0} end
local exp = now_ms() + tonumber(ARGV[6])
local new = redis.call('HSET', P .. 'hl:' .. ARGV[2], ARGV[5], exp)
redis.call('ZADD', P .. 'leases', exp, ARGV[4])
if new == 1 then
  for _, page in ipairs(cjson.decode(redis.call('HGET', ckey, 'uniq'))) do
    redis.call('HINCRBY', P .. 'pg:' .. page, 'rc', 1)
  end
end
local gen = redis.call('HGET', ckey, 'gen')
if gen == ARGV[7] then return {1, new, gen} end
return {1, new, gen, redis.call('HGETALL', ckey)}
"""

# ARGV: prefix, cid, member, holder, ttl_ms -> 1 renewed | 0 lease gone
RENEW = _PRELUDE + r"""
if not redis.call('ZSCORE', P .. 'leases', ARGV[3]) then return 0 end
local exp = now_ms() + tonumber(ARGV[5])
redis.call('ZADD', P .. 'leases', 'XX', exp, ARGV[3])
redis.call('HSET', P .. 'hl:' .. ARGV[2], ARGV[4], exp)
return 1
"""

# ARGV: prefix, member -> {released, context_removed, {freeable...}}
RELEASE = _PRELUDE + r"""
local released, removed, freeable = release_lease(ARGV[2])
return {released, removed, freeable}
"""

# ARGV: prefix, limit -> {reaped, {freeable...}, {removed context ids...}}
REAP = _PRELUDE + r"""
local members = redis.call('ZRANGEBYSCORE', P .. 'leases', '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[2]))
local reaped, freeable, removed = 0, {}, {}
for _, m in ipairs(members) do
  local r, rm, fr = release_lease(m)
  reaped = reaped + r
  for _, page in ipairs(fr) do table.insert(freeable, page) end
  if rm == 1 then table.insert(removed, cjson.decode(m)[1]) end
end
return {reaped, freeable, removed}
"""

# ARGV: prefix, cid, k1, v1, k2, v2, ... -> 1 created | 0 identical exists | -1 id taken | -2 being deleted
CREATE = _PRELUDE + r"""
local ckey = P .. 'ctx:' .. ARGV[2]
local fields = {}
for i = 3, #ARGV, 2 do fields[ARGV[i]] = ARGV[i + 1] end
if redis.call('EXISTS', ckey) == 1 then
  if redis.call('HGET', ckey, 'deleted') == '1' then return -2 end
  for _, k in ipairs({'tenant', 'model_id', 'dtype', 'page_ids', 'token_spans', 'num_tokens'}) do
    if redis.call('HGET', ckey, k) ~= fields[k] then return -1 end
  end
  return 0
end
local flat = {}
for i = 3, #ARGV do table.insert(flat, ARGV[i]) end
redis.call('HSET', ckey, 'deleted', '0', unpack(flat))
for _, page in ipairs(cjson.decode(fields['uniq'])) do
  redis.call('HINCRBY', P .. 'pg:' .. page, 'ctx', 1)
end
redis.call('SADD', P .. 'contexts', ARGV[2])
return 1
"""

# ARGV: prefix, cid, tenant -> {-1} not found | {removed(0/1), holders, {freeable...}}
DELETE = _PRELUDE + r"""
local ckey = live_record(ARGV[2], ARGV[3])
if not ckey then return {-1} end
local freeable = {}
for _, page in ipairs(cjson.decode(redis.call('HGET', ckey, 'uniq'))) do
  local pk = P .. 'pg:' .. page
  local c = redis.call('HINCRBY', pk, 'ctx', -1)
  if c < 0 then redis.call('HSET', pk, 'ctx', 0); c = 0 end
  if c == 0 and tonumber(redis.call('HGET', pk, 'rc') or '0') <= 0 then table.insert(freeable, page) end
end
redis.call('SREM', P .. 'contexts', ARGV[2])
local holders = redis.call('HLEN', P .. 'hl:' .. ARGV[2])
if holders > 0 then
  redis.call('HSET', ckey, 'deleted', '1')
  return {0, holders, freeable}
end
redis.call('DEL', ckey, P .. 'hl:' .. ARGV[2], P .. 'blobs:' .. ARGV[2], P .. 'doc:' .. ARGV[2])
return {1, 0, freeable}
"""

# ARGV: prefix, page... -> pages with rc == ctx == 0 (their counters are deleted)
CLAIM_FREE = _PRELUDE + r"""
local out = {}
for i = 2, #ARGV do
  local pk = P .. 'pg:' .. ARGV[i]
  local v = redis.call('HMGET', pk, 'rc', 'ctx')
  if tonumber(v[1] or '0') <= 0 and tonumber(v[2] or '0') <= 0 then
    redis.call('DEL', pk)
    table.insert(out, ARGV[i])
  end
end
return out
"""

# ARGV: prefix, page... -> pages with rc == 0 now
CLAIM_EVICT = _PRELUDE + r"""
local out = {}
for i = 2, #ARGV do
  if tonumber(redis.call('HGET', P .. 'pg:' .. ARGV[i], 'rc') or '0') <= 0 then table.insert(out, ARGV[i]) end
end
return out
"""

# ARGV: prefix, cid, tenant ('' = unchecked), name, meta json -> 1 | 0 not found
PUT_BLOB_META = _PRELUDE + r"""
if not live_record(ARGV[2], ARGV[3]) then return 0 end
redis.call('HSET', P .. 'blobs:' .. ARGV[2], ARGV[4], ARGV[5])
return 1
"""

# ARGV: prefix, cid, tenant, name -> {0} context not found | {1, json or false}
GET_BLOB_META = _PRELUDE + r"""
if not live_record(ARGV[2], ARGV[3]) then return {0} end
return {1, redis.call('HGET', P .. 'blobs:' .. ARGV[2], ARGV[4])}
"""

# ARGV: prefix, cid, tenant ('' = unchecked), text -> 1 | 0 not found
PUT_DOC = _PRELUDE + r"""
if not live_record(ARGV[2], ARGV[3]) then return 0 end
redis.call('SET', P .. 'doc:' .. ARGV[2], ARGV[4])
return 1
"""

# ARGV: prefix, cid, tenant -> {0} context not found | {1, text or false}
GET_DOC = _PRELUDE + r"""
if not live_record(ARGV[2], ARGV[3]) then return {0} end
return {1, redis.call('GET', P .. 'doc:' .. ARGV[2])}
"""
