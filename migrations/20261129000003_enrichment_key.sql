-- An extraction's identity for the enrichment is (tenant, document, request id), not the request
-- id alone: the gateway's request id may come from the client (`X-Request-Id` is accepted and
-- echoed), so two tenants -- or one client reusing its ids for different documents -- could
-- otherwise collide, and the second extraction's enrichment would be dropped as a "redelivery".
-- The same request retried (a legacy gateway retry, a producer retry) still has the same key.
ALTER TABLE enrichment_documents
    DROP CONSTRAINT enrichment_documents_pkey,
    ADD PRIMARY KEY (tenant_id, doc_id, event_id);
