-- Least privilege, second pass (issue 28).
--
-- The gateway reads the columns its key lookup reads, not whole tables: a compromised gateway
-- could read every tenant's name and plan, and every key's creation time, with SELECT on the
-- tables (20261201000001).
REVOKE SELECT ON api_keys, tenants FROM lab_gateway;
GRANT SELECT (key_id, tenant_id, key_sha256, revoked_at) ON api_keys TO lab_gateway;
GRANT SELECT (id, rate_limit_rps) ON tenants TO lab_gateway;

-- entity-service counted the database's busy connections across every role ("200 of 200
-- connections active", the postmortem's Step 2) through pg_read_all_stats, which also shows it
-- every session's query text - the ALTER ROLE ... PASSWORD statements the deployment runs
-- included. The count alone, through a function that runs as its owner (the migrating role:
-- the local superuser, or lab_owner, a member of pg_read_all_stats), and the membership
-- revoked. The function returns what the gauge needs and nothing else: no text, no role names.
CREATE FUNCTION lab_busy_connections() RETURNS bigint
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND backend_type = 'client backend'
      AND state <> 'idle' AND pid <> pg_backend_pid()
$$;
REVOKE ALL ON FUNCTION lab_busy_connections() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lab_busy_connections() TO lab_entity_service;
-- Roles are cluster-wide and 20261201000001 grants the membership in every database it
-- migrates; this revokes it in the same run (a concurrent migration of another database may
-- hold it for the moment between the two).
REVOKE pg_read_all_stats FROM lab_entity_service;

-- PostgreSQL 15 no longer lets PUBLIC create in the public schema of a new database; a cluster
-- upgraded from an older one keeps the old default. Explicit, whichever created this one.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
