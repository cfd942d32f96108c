//! Events on the asynchronous path (Kafka), off the request path.

use serde::{Deserialize, Serialize};

/// The topic every completed extraction is published to (postmortem: "Async pipeline: Kafka (12
/// partitions on the ingest topic)").
pub const DOC_INGESTED_TOPIC: &str = "doc.ingested";

/// Partitions of `doc.ingested`: the postmortem's 12.
pub const DOC_INGESTED_PARTITIONS: i32 = 12;

/// The consumer group of the enrichment workers (postmortem, "Step 3: Kafka").
pub const ENRICHMENT_GROUP: &str = "enrichment-workers";

/// One completed extraction, as the orchestrator publishes it to `doc.ingested`, keyed by
/// `doc_id` (one document's events stay in one partition, in order).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocIngested {
    /// The gateway's request id, the same on every gateway attempt of one request. With the tenant
    /// and the document it is the extraction's identity: a consumer applies each
    /// `(tenant_id, doc_id, event_id)` once, so the same extraction published twice (a legacy
    /// gateway retry whose first attempt also finished, a producer retry) changes nothing the
    /// second time, while a client that reuses request ids cannot make two documents collide.
    pub event_id: String,
    pub doc_id: String,
    pub tenant_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    /// Each resolved entity once, with how often the document mentions it; sorted by entity id.
    pub mentions: Vec<Mention>,
    /// Candidate spans that resolved to nothing.
    pub unresolved: usize,
    /// Distinct span queries in the document, and how many the orchestrator's cache answered.
    pub spans: usize,
    pub cache_hits: usize,
    /// How long the orchestrator worked on the document.
    pub duration_ms: f64,
    /// When the orchestrator finished it (Unix milliseconds).
    pub extracted_at_unix_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Mention {
    pub entity_id: i64,
    pub count: u32,
}
