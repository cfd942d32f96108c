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
-- of a second). args[2]: burst, in requests. Returns {allowed, retry_after_us}. Numbers stay
-- below 2^53 microseconds, exact in Lua's doubles; they are written with %.0f because tostring
-- would switch to exponent notation and lose precision.
local function gcra(keys, args)
  local interval = tonumber(args[1])
  local tolerance = (tonumber(args[2]) - 1) * interval
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local tat = tonumber(redis.call('GET', keys[1]) or now)
  if tat < now then tat = now end
  if tat - now > tolerance then
    return {0, math.floor(tat - now - tolerance)}
  end
  local new_tat = tat + interval
  redis.call('SET', keys[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
  return {1, 0}
end

redis.register_function('lab_gcra', gcra)
