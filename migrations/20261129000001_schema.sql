-- The lab's schema: the document-intelligence API's tenants, their API keys, and the entity store
-- that entity-service resolves against. Shapes follow ../shared/design/stale-stats-trigger.md: the
-- hot lookup's index is (tenant_id, kind, popularity DESC) and `locale` exists from the start as a
-- narrow, all-NULL column (analyzed while NULL, which is harmless) so that the later backfill can
-- populate it and a metadata-only widening can drop its statistics.

CREATE TABLE tenants (
    id          bigint      PRIMARY KEY,
    name        text        NOT NULL,
    -- Requests per second the edge admits for this tenant (used by the rate limiter).
    plan        text        NOT NULL DEFAULT 'standard' CHECK (plan IN ('trial', 'standard', 'enterprise')),
    rate_limit_rps integer  NOT NULL DEFAULT 50 CHECK (rate_limit_rps > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- An API key is `rsl_<key_id>_<secret>`. Only the SHA-256 of the whole key is stored: keys are
-- 256-bit random strings, so a fast hash is as strong as a slow one and keeps auth off the CPU.
CREATE TABLE api_keys (
    key_id      text        PRIMARY KEY,
    tenant_id   bigint      NOT NULL REFERENCES tenants (id),
    key_sha256  bytea       NOT NULL CHECK (octet_length(key_sha256) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id);

CREATE TABLE entities (
    id              bigint       PRIMARY KEY,
    tenant_id       bigint       NOT NULL REFERENCES tenants (id),
    kind            text         NOT NULL CHECK (kind IN ('organization', 'person', 'location', 'product')),
    canonical_name  text         NOT NULL,
    normalized_name text         NOT NULL,
    external_ref    text         NOT NULL,
    source          text         NOT NULL,
    popularity      integer      NOT NULL CHECK (popularity >= 0),
    attributes      jsonb        NOT NULL DEFAULT '{}'::jsonb,
    -- NULL for every row until the backfill (issue: the real trigger). varchar(8) on purpose: the
    -- backfill's last step widens it, which is metadata-only and drops the column's statistics.
    locale          varchar(8),
    created_at      timestamptz  NOT NULL DEFAULT now(),
    updated_at      timestamptz  NOT NULL DEFAULT now()
);

-- Exact match: the first lookup for every span.
CREATE INDEX entities_tenant_normalized_idx ON entities (tenant_id, normalized_name);
-- The candidate lookup (top-20 of a kind by popularity): the index the planner abandons when
-- `locale` has no statistics.
CREATE INDEX entities_tenant_kind_popularity_idx ON entities (tenant_id, kind, popularity DESC);
-- What a real entity store also carries: idempotent upserts from the source systems, and the
-- incremental sync that reads recently changed rows. They also make the backfill's bloat honest
-- (every updated row is a new index entry in each of them).
CREATE UNIQUE INDEX entities_tenant_external_ref_idx ON entities (tenant_id, external_ref);
CREATE INDEX entities_updated_at_idx ON entities (updated_at);
