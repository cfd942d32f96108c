-- The lab's roles, made ONCE, when PostgreSQL initialises an empty volume (k8s/README.md,
-- "Admin port, roles, policies"). The official image runs /docker-entrypoint-initdb.d/*.sql with
-- psql as the superuser over the local socket, in the database POSTGRES_DB (retry_storm_lab), on a
-- server that listens on no TCP port yet: nothing else is connected. Mounted there by kind
-- (ConfigMap postgres-initdb, kustomization.yaml) and compose (bind mount of this folder).
--
--   lab_owner            labctl: owns the database, so the schema, the tables and the functions the
--                        migrations make; seeds, backfills, ALTER TABLE ... SET (autovacuum_enabled),
--                        ANALYZE, VACUUM. NOT superuser, NOT CREATEROLE (on PostgreSQL 15 a
--                        CREATEROLE role can grant itself pg_execute_server_program: a shell), NOT
--                        CREATEDB (the database exists from here on). pg_read_all_stats WITH ADMIN
--                        OPTION: lab_busy_connections(), SECURITY DEFINER and owned by it, counts
--                        every role's busy sessions, and a migration grants and revokes that
--                        membership on lab_entity_service.
--   lab_gateway, lab_entity_service, lab_enrichment
--                        the services, LOGIN only; their grants come from the migrations.
--
-- Only the superuser may create roles, so they are made here and the migrations find them. The
-- database is given to lab_owner. Its schema public needs nothing: on PostgreSQL 15 it is owned by
-- pg_database_owner, i.e. whoever owns the database (asserted below).
--
-- Passwords come from the server container's environment, never argv: LAB_OWNER_DB_PASSWORD,
-- LAB_GATEWAY_DB_PASSWORD, LAB_ENTITY_SERVICE_DB_PASSWORD, LAB_ENRICHMENT_DB_PASSWORD (psql >= 15
-- for \getenv). :'var' quotes each as a literal. Idempotent, but it runs once: to change a password
-- later see "Rotation" in k8s/README.md (psql's \password, over the socket).
\set ON_ERROR_STOP on
\getenv owner_password LAB_OWNER_DB_PASSWORD
\getenv gateway_password LAB_GATEWAY_DB_PASSWORD
\getenv entity_service_password LAB_ENTITY_SERVICE_DB_PASSWORD
\getenv enrichment_password LAB_ENRICHMENT_DB_PASSWORD

\if :{?owner_password}
\else
  DO $$ BEGIN RAISE EXCEPTION 'LAB_OWNER_DB_PASSWORD is not set'; END $$;
\endif
\if :{?gateway_password}
\else
  DO $$ BEGIN RAISE EXCEPTION 'LAB_GATEWAY_DB_PASSWORD is not set'; END $$;
\endif
\if :{?entity_service_password}
\else
  DO $$ BEGIN RAISE EXCEPTION 'LAB_ENTITY_SERVICE_DB_PASSWORD is not set'; END $$;
\endif
\if :{?enrichment_password}
\else
  DO $$ BEGIN RAISE EXCEPTION 'LAB_ENRICHMENT_DB_PASSWORD is not set'; END $$;
\endif
-- PostgreSQL turns an empty password into "no password" with only a NOTICE: refuse it instead.
SELECT :'owner_password' = '' OR :'gateway_password' = '' OR :'entity_service_password' = ''
    OR :'enrichment_password' = '' AS some_password_empty \gset
\if :some_password_empty
  DO $$ BEGIN RAISE EXCEPTION 'a LAB_*_DB_PASSWORD is empty'; END $$;
\endif

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['lab_owner', 'lab_gateway', 'lab_entity_service', 'lab_enrichment'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I LOGIN', r);
        END IF;
    END LOOP;
END
$$;

-- Every attribute stated, so a role found already made ends up the same. Stored as SCRAM
-- verifiers (PostgreSQL 15's default, stated), matching pg_hba's scram-sha-256.
SET password_encryption = 'scram-sha-256';
ALTER ROLE lab_owner LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOREPLICATION NOBYPASSRLS INHERIT
    PASSWORD :'owner_password';
ALTER ROLE lab_gateway LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOREPLICATION NOBYPASSRLS
    PASSWORD :'gateway_password';
ALTER ROLE lab_entity_service LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOREPLICATION NOBYPASSRLS
    PASSWORD :'entity_service_password';
ALTER ROLE lab_enrichment LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOREPLICATION NOBYPASSRLS
    PASSWORD :'enrichment_password';
GRANT pg_read_all_stats TO lab_owner WITH ADMIN OPTION;

-- POSTGRES_DB made the database already (as the superuser's); without it, make it here.
SELECT NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'retry_storm_lab') AS make_database \gset
\if :make_database
  CREATE DATABASE retry_storm_lab OWNER lab_owner;
\endif
ALTER DATABASE retry_storm_lab OWNER TO lab_owner;

\connect retry_storm_lab
DO $$
BEGIN
    IF (SELECT nspowner <> 'pg_database_owner'::regrole FROM pg_namespace WHERE nspname = 'public') THEN
        RAISE EXCEPTION 'schema public is not owned by pg_database_owner (PostgreSQL < 15?): lab_owner could not create in it';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'lab_owner'
               AND (rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls)) THEN
        RAISE EXCEPTION 'lab_owner must be NOSUPERUSER NOCREATEROLE NOCREATEDB NOREPLICATION NOBYPASSRLS';
    END IF;
END
$$;
\echo 'roles made: lab_owner (owns retry_storm_lab) lab_gateway lab_entity_service lab_enrichment'
