#!lua name=retry_storm_lab
-- The edge-gateway's per-tenant rate limit: GCRA (the generic cell rate algorithm), atomic on the
-- Redis server, so every gateway replica sees one budget per tenant. The clock is Redis's own
-- (TIME), so replicas with skewed clocks still agree.
--
-- Loaded by the operator (lab_flags::acl::load_functions: labctl up, labctl fault start redis,
-- lab-e2e labs; in docker-compose.yml and the kind overlay, the Redis container at every start);
-- the gateway's Redis user may only call it (FCALL), never load code of its own (issue 28).
--
-- keys[1]: the tenant's key. args[1]: emission interval T in microseconds (one request's share
-- of a second). args[2]: burst, in requests. args[3] (optional, 0 when absent): the requests the
-- calling replica admitted on its own bucket since Redis last answered it, charged before the
-- decision, so an account that alternates between Redis and the replica's bucket is one account
-- (issue 28: 1.16-1.4x a plan passed where they alternated). They are charged as if they came
-- now, which is earlier than they did, so the charge stops at the burst: a long outage's
-- admissions cost the tenant at most its burst, never its sustained rate. Returns {allowed,
-- retry_after_us}. Numbers stay below 2^53 microseconds, exact in Lua's doubles; they are
-- written with %.0f because tostring would switch to exponent notation and lose precision.
local function gcra(keys, args)
  local interval = tonumber(args[1])
  local tolerance = (tonumber(args[2]) - 1) * interval
  local debt = tonumber(args[3] or 0)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local tat = tonumber(redis.call('GET', keys[1]) or now)
  if tat < now then tat = now end
  if debt > 0 then
    tat = math.max(tat, math.min(tat + debt * interval, now + tolerance + interval))
  end
  local function keep(until_us)
    redis.call('SET', keys[1], string.format('%.0f', until_us), 'PX', math.ceil((until_us - now) / 1000) + 1)
  end
  if tat - now > tolerance then
    if debt > 0 then keep(tat) end
    return {0, math.floor(tat - now - tolerance)}
  end
  keep(tat + interval)
  return {1, 0}
end

redis.register_function('lab_gcra', gcra)
