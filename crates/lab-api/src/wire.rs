//! JSON bodies on every hop.
//!
//! Unknown fields are rejected on every request body (`deny_unknown_fields`): a misspelled
//! optional field (`"loacle"`) silently ignored is a support ticket later, and strictness costs
//! nothing on an API whose clients send five fields.

use serde::{Deserialize, Serialize};

/// `POST /v1/extract` at the edge.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExtractRequest {
    pub doc_id: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc_type: Option<String>,
}

/// The answer to an extraction: every entity found, with offsets into the submitted `text`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExtractResponse {
    pub doc_id: String,
    pub entities: Vec<ExtractedEntity>,
    /// Candidate spans that did not resolve to any entity.
    pub unresolved: usize,
}

/// One resolved mention. Offsets count Unicode scalar values (Rust `char`s, Python `str`
/// indices), `start` inclusive and `end` exclusive, so `text[start..end]` in Python is the mention.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExtractedEntity {
    pub entity: EntityRef,
    pub confidence: f32,
    pub start: usize,
    pub end: usize,
    pub mention: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct EntityRef {
    pub id: i64,
    pub name: String,
    pub kind: String,
}

/// `POST /internal/extract`: gateway → orchestrator. The tenant is the one the gateway
/// authenticated, in the body so the orchestrator never parses credentials.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InternalExtractRequest {
    pub tenant_id: i64,
    pub doc_id: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc_type: Option<String>,
}

/// `POST /v1/resolve`: orchestrator → entity-service, one batch of cache misses.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    pub doc_id: String,
    pub tenant: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    pub spans: Vec<SpanQuery>,
}

/// A span as the orchestrator sends it: already normalized, with the orchestrator's kind guess.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct SpanQuery {
    pub normalized: String,
    pub kind: String,
}

/// `results[i]` answers `spans[i]`; `None` means no entity matched well enough.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResolveResponse {
    pub results: Vec<Option<Resolution>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Resolution {
    pub entity: EntityRef,
    pub confidence: f32,
    pub method: MatchMethod,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MatchMethod {
    /// `(tenant_id, normalized_name)` matched exactly.
    Exact,
    /// Best of the tenant's top-20 entities of the span's kind (the locale-aware lookup).
    Candidate,
}

/// `GET /v1/popular?limit=N`: entity-service → orchestrator, the most popular entities of all
/// tenants, for the orchestrator's cache warm-up on boot.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PopularResponse {
    pub entities: Vec<PopularEntity>,
}

/// One entity as an exact match of its own normalized name (what a span naming it resolves to).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PopularEntity {
    pub tenant: i64,
    pub normalized: String,
    pub entity: EntityRef,
}

/// Every error any lab service returns: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorDetail {
    /// Stable, machine-readable (`unauthorized`, `invalid_request`, `deadline_exceeded`, ...).
    pub code: String,
    /// For humans; never a stack trace.
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            error: ErrorDetail {
                code: code.into(),
                message: message.into(),
            },
        }
    }
}
