-- Least privilege: one database role per service, with only the grants its queries need.
--
--   lab_gateway         reads API keys and plans (auth: api_keys JOIN tenants)
--   lab_entity_service  reads entities (resolve, popular) and the statistics views its gauges
--                       read for every role's sessions (pg_read_all_stats: pg_stat_activity's
--                       state of other roles' backends, pg_stats of entities)
--   lab_enrichment      writes the enrichment tables (INSERT ... ON CONFLICT DO UPDATE needs
--                       SELECT, INSERT and UPDATE)
--
-- The orchestrator has no database access at all. labctl (seed, backfill, ANALYZE, game days)
-- migrates as the database's owner: natively the local superuser; in compose and kind
-- `lab_owner`, neither superuser nor CREATEROLE, where the database's first start creates these
-- roles with their passwords (k8s/README.md). An internet-facing gateway that could read or
-- write entities, or an entity-service that could read key hashes, is what this takes away.
--
-- Created here, they have no password: natively PostgreSQL trusts loopback; in compose and
-- kind they exist before this runs, with passwords from a Secret (k8s/README.md). Roles are
-- cluster-wide while this migration runs once per database, possibly in several databases at
-- once (the test suite): an existing role, or a concurrent creation, is not an error.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['lab_gateway', 'lab_entity_service', 'lab_enrichment'] LOOP
        -- Only where it does not exist yet: an owner without CREATEROLE is refused CREATE ROLE
        -- even for a role that exists.
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I LOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;
    BEGIN
        GRANT pg_read_all_stats TO lab_entity_service;
    EXCEPTION WHEN unique_violation THEN
        NULL;
    END;
END
$$;

GRANT USAGE ON SCHEMA public TO lab_gateway, lab_entity_service, lab_enrichment;
GRANT SELECT ON api_keys, tenants TO lab_gateway;
GRANT SELECT ON entities TO lab_entity_service;
GRANT SELECT, INSERT, UPDATE ON enrichment_documents, tenant_entity_mentions, entity_cooccurrence
    TO lab_enrichment;
