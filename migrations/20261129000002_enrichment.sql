-- The enrichment workers' output (issue: Kafka-fed enrichment, off the synchronous path).
-- One row per applied `doc.ingested` event, and what the worker derives from it: per-tenant
-- mention statistics and entity co-occurrence counts (what a cache warm-up can use later: the
-- entities a tenant mentions most, and the ones that come together).
--
-- Idempotency lives in the first table: a worker inserts the event's row and applies the counts
-- in ONE transaction, only when that insert actually inserted. An event delivered twice (Kafka
-- is at-least-once; a worker killed between its write and its offset commit reprocesses) finds
-- its row and changes nothing.

CREATE TABLE enrichment_documents (
    -- The extraction's identity (the gateway's request id): one row per extraction.
    event_id        text        PRIMARY KEY,
    tenant_id       bigint      NOT NULL,
    doc_id          text        NOT NULL,
    entities        integer     NOT NULL CHECK (entities >= 0),
    mentions        integer     NOT NULL CHECK (mentions >= 0),
    unresolved      integer     NOT NULL CHECK (unresolved >= 0),
    extracted_at    timestamptz NOT NULL,
    enriched_at     timestamptz NOT NULL DEFAULT now(),
    -- Where the event was read from, for tracing a row back to the log.
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL
);
CREATE INDEX enrichment_documents_tenant_idx ON enrichment_documents (tenant_id, enriched_at);

CREATE TABLE tenant_entity_mentions (
    tenant_id   bigint      NOT NULL,
    entity_id   bigint      NOT NULL,
    documents   bigint      NOT NULL CHECK (documents > 0),
    mentions    bigint      NOT NULL CHECK (mentions > 0),
    last_seen   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, entity_id)
);

-- Each unordered pair once: entity_a < entity_b.
CREATE TABLE entity_cooccurrence (
    tenant_id   bigint NOT NULL,
    entity_a    bigint NOT NULL,
    entity_b    bigint NOT NULL,
    documents   bigint NOT NULL CHECK (documents > 0),
    PRIMARY KEY (tenant_id, entity_a, entity_b),
    CHECK (entity_a < entity_b)
);
