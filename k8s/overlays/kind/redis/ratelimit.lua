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
-- of a second). args[2]: burst, in requests. args[3] (optional, 0 when absent): how far ahead
-- of now, in microseconds, the calling replica's own bucket is full, sent while that bucket has
-- admitted requests Redis was not asked about (it decided alone when Redis missed its
-- deadline). The account keeps the later of the two, so one that alternates between Redis and
-- a replica's bucket is one account (issue 28: a tenant at 3x its plan was admitted at 1.16x
-- while they kept two). A state, not a count: sent twice (a call that timed out after it ran)
-- it charges once, and it has drained with the time that passed until it was sent (a call run
-- late applies it at the later clock). It can set the account no later than a full bucket's. Returns {allowed, retry_after_us}. Numbers stay below 2^53
-- microseconds, exact in Lua's doubles; they are written with %.0f because tostring would
-- switch to exponent notation and lose precision.
local function gcra(keys, args)
  local interval = tonumber(args[1])
  local tolerance = (tonumber(args[2]) - 1) * interval
  local ahead = tonumber(args[3]) or 0
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local tat = tonumber(redis.call('GET', keys[1]) or now)
  if tat < now then tat = now end
  local raised = false
  if ahead > 0 then
    local theirs = now + math.min(ahead, tolerance + interval)
    if theirs > tat then tat, raised = theirs, true end
  end
  local function keep(until_us)
    local ttl_ms = math.ceil((until_us - now) / 1000) + 1
    redis.call('SET', keys[1], string.format('%.0f', until_us), 'PX', ttl_ms)
  end
  if tat - now > tolerance then
    if raised then keep(tat) end
    return {0, math.floor(tat - now - tolerance)}
  end
  keep(tat + interval)
  return {1, 0}
end

redis.register_function('lab_gcra', gcra)
