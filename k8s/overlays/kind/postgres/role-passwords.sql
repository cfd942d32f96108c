-- Login passwords for the services' least-privilege roles (k8s/README.md, "Admin port, roles,
-- policies"). The migration creates lab_gateway, lab_entity_service and lab_enrichment with LOGIN
-- and no password (a migration carries no secrets); this script sets them, run by psql as the
-- superuser right after `labctl db prepare`: in kind by the seed Job's db-role-passwords step, in
-- compose by the db-role-passwords service. Idempotent: run it again after changing a password.
--
--   psql -X -f role-passwords.sql     (psql >= 15 for \getenv; PG* variables say where and who)
--
-- Passwords come from the environment, never from argv: LAB_GATEWAY_DB_PASSWORD,
-- LAB_ENTITY_SERVICE_DB_PASSWORD, LAB_ENRICHMENT_DB_PASSWORD. :'var' quotes each as a literal.
\set ON_ERROR_STOP on
\getenv gateway_password LAB_GATEWAY_DB_PASSWORD
\getenv entity_service_password LAB_ENTITY_SERVICE_DB_PASSWORD
\getenv enrichment_password LAB_ENRICHMENT_DB_PASSWORD

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
SELECT :'gateway_password' = '' OR :'entity_service_password' = '' OR :'enrichment_password' = ''
  AS some_password_empty \gset
\if :some_password_empty
  DO $$ BEGIN RAISE EXCEPTION 'a LAB_*_DB_PASSWORD is empty'; END $$;
\endif

SELECT count(*) = 3 AS roles_exist
  FROM pg_roles WHERE rolname IN ('lab_gateway', 'lab_entity_service', 'lab_enrichment') \gset
\if :roles_exist
\else
  DO $$ BEGIN RAISE EXCEPTION 'roles lab_gateway, lab_entity_service, lab_enrichment missing: run labctl db prepare first (the migration creates them)'; END $$;
\endif

-- Stored as SCRAM verifiers (PostgreSQL 15's default, stated), matching pg_hba's scram-sha-256.
SET password_encryption = 'scram-sha-256';
ALTER ROLE lab_gateway PASSWORD :'gateway_password';
ALTER ROLE lab_entity_service PASSWORD :'entity_service_password';
ALTER ROLE lab_enrichment PASSWORD :'enrichment_password';
\echo 'passwords set: lab_gateway lab_entity_service lab_enrichment'
