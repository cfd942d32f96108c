-- entity-service's database facts (services/entity-service/src/dbstats.rs) EXPLAIN the hot
-- statement for a typical tenant, chosen as the median tenant id (lab_db::inspect::HotParams).
-- 20261201000001 granted lab_entity_service `entities` only, so on a fresh database that probe
-- failed every 5 s with "permission denied for table tenants": entity_db_stats_up read 0 and
-- entity_db_hot_plan_index_scan never moved from 0 (issue 24). The ids, and nothing else of the
-- table (no plan, no name): a column grant.
GRANT SELECT (id) ON tenants TO lab_entity_service;
