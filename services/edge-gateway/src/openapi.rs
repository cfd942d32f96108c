//! The OpenAPI document of the public API, generated from the code and served at
//! `GET /openapi.json`.
//!
//! The wire types live in `lab-api`, which knows nothing of OpenAPI; [`schema`] mirrors the ones
//! the public API exposes, field for field, and the tests prove the mirrors serialize exactly as
//! the real types do (`tests/openapi.rs`). The committed `openapi.json` next to `Cargo.toml` is
//! this document; a test fails when they differ (`UPDATE_OPENAPI=1` rewrites the file), and
//! `scripts/schemathesis.sh` fuzzes a running gateway against it.

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{HeaderBuilder, ObjectBuilder, Type};
use utoipa::{Modify, OpenApi};

/// The document, built from the annotated handlers and the [`schema`] mirrors.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "retry-storm-lab public API",
        description = "Document intelligence at the edge: POST a document, get the entities it \
                       mentions with character offsets. Every request has a 3 s budget; every \
                       error is `{\"error\": {\"code\", \"message\"}}`.",
    ),
    paths(crate::extract::extract, openapi_json),
    components(schemas(
        schema::ExtractRequest,
        schema::ExtractResponse,
        schema::ExtractedEntity,
        schema::EntityRef,
        schema::ErrorBody,
        schema::ErrorDetail,
    )),
    modifiers(&EdgeConventions),
    tags(
        (name = "extraction", description = "The product: entities in a document."),
        (name = "operations", description = "This document; no API key. (Probes and metrics are on \
                                             the admin listener, not on this port.)"),
    )
)]
pub struct ApiDoc;

/// The document as served: pretty JSON with a trailing newline (the committed file's bytes).
pub fn document() -> String {
    let mut json = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    json.push('\n');
    json
}

/// The security scheme name the document uses.
pub const SECURITY_SCHEME: &str = "api_key";

/// What the derive cannot say by itself: the bearer scheme, and that every answer of
/// `/v1/extract` carries `X-Request-Id` (the handler sets it on all of them).
struct EdgeConventions;

impl Modify for EdgeConventions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            SECURITY_SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("rsl_<key_id>_<secret>")
                    .description(Some(
                        "An API key: `Authorization: Bearer rsl_<12 hex key id>_<hex secret>`.",
                    ))
                    .build(),
            ),
        );
        let request_id = HeaderBuilder::new()
            .schema(ObjectBuilder::new().schema_type(Type::String))
            .description(Some(
                "The request's id, made by the gateway for every request (a client's own \
                 `X-Request-Id` is not used as the id: the id picks the hotfix canary's cohort \
                 on every hop; a short printable one, up to 128 bytes, is kept on the request's \
                 trace as `client.request_id`). Quote it in support requests; every service \
                 logs it.",
            ))
            .build();
        // `Retry-After: 0` would invite an immediate retry; the handler sends at least 1.
        let retry_after = HeaderBuilder::new()
            .schema(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1)),
            )
            .description(Some(
                "Whole seconds (at least 1) until a request will be admitted again.",
            ))
            .build();
        let extract = openapi
            .paths
            .paths
            .get_mut("/v1/extract")
            .and_then(|item| item.post.as_mut());
        if let Some(op) = extract {
            for (status, response) in op.responses.responses.iter_mut() {
                if let utoipa::openapi::RefOr::T(r) = response {
                    r.headers.insert("X-Request-Id".into(), request_id.clone());
                    if let Some(h) = r.headers.get_mut("Retry-After") {
                        *h = retry_after.clone();
                    }
                    if let Some(codes) = error_codes(status) {
                        r.description = format!("{} {codes}", r.description);
                    }
                }
            }
        }
    }
}

/// The error codes `/v1/extract` can answer with `status`, from the error table
/// (`lab_contract::errors`): every row of every hop passes up unchanged, so the document lists
/// them all, with what each means. `None` for a status without rows.
pub fn error_codes(status: &str) -> Option<String> {
    let status: u16 = status.parse().ok()?;
    // Client errors are the gateway's own and say their code in their description already.
    if status < 500 {
        return None;
    }
    let mut rows: Vec<&lab_contract::Failure> = lab_contract::errors::TABLE
        .iter()
        .copied()
        .filter(|f| f.status == status)
        .collect();
    if rows.is_empty() {
        return None;
    }
    // One line per code; a code several hops share (`invalid_request`) is listed once.
    rows.sort_by_key(|f| f.code);
    rows.dedup_by_key(|f| f.code);
    let items: Vec<String> = rows
        .iter()
        .map(|f| format!("`{}`: {}", f.code, f.means))
        .collect();
    Some(format!("Codes: {}.", items.join("; ")))
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "This document.", body = Object, content_type = "application/json")),
)]
pub async fn openapi_json(
    axum::extract::State(doc): axum::extract::State<std::sync::Arc<str>>,
) -> axum::response::Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        doc.to_string(),
    )
        .into_response()
}

/// Mirrors of the `lab-api` wire types the public API exposes, with the gateway's validation
/// rules as schema constraints (the defaults of `[limits]`; a test keeps them equal).
pub mod schema {
    use serde::{Deserialize, Serialize};
    use utoipa::ToSchema;

    /// A document to extract entities from (`lab_api::wire::ExtractRequest`). Unknown fields are
    /// refused, so a misspelled optional field is an error rather than silently ignored.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct ExtractRequest {
        /// The client's id for the document, echoed in the answer: 1..=128 characters, no
        /// control characters.
        #[schema(
            min_length = 1,
            max_length = 128,
            pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$"
        )]
        pub doc_id: String,
        /// The document's text: 1..=200000 characters.
        #[schema(min_length = 1, max_length = 200000)]
        pub text: String,
        /// A language tag such as `de` or `fr-CA`: letters, digits and `-`, at most 35.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 35, pattern = r"^[A-Za-z0-9-]+$")]
        pub locale: Option<String>,
        /// The kind of document (`contract`, `invoice`, ...): 1..=64 characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 64)]
        pub doc_type: Option<String>,
    }

    /// Every entity found in the document (`lab_api::wire::ExtractResponse`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
    pub struct ExtractResponse {
        /// The request's `doc_id`.
        pub doc_id: String,
        /// Resolved mentions, in document order.
        pub entities: Vec<ExtractedEntity>,
        /// Candidate spans that did not resolve to any entity.
        pub unresolved: usize,
    }

    /// One resolved mention (`lab_api::wire::ExtractedEntity`). Offsets count Unicode scalar
    /// values, `start` inclusive and `end` exclusive: `text[start:end]` in Python is `mention`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
    pub struct ExtractedEntity {
        pub entity: EntityRef,
        /// 1.0 for an exact match, lower for a candidate match.
        pub confidence: f32,
        pub start: usize,
        pub end: usize,
        pub mention: String,
    }

    /// The entity a mention resolved to (`lab_api::wire::EntityRef`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
    pub struct EntityRef {
        pub id: i64,
        pub name: String,
        /// `organization`, `person`, ...
        pub kind: String,
    }

    /// Every error (`lab_api::wire::ErrorBody`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
    pub struct ErrorBody {
        pub error: ErrorDetail,
    }

    /// `lab_api::wire::ErrorDetail`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
    pub struct ErrorDetail {
        /// Stable and machine-readable; each response below lists the codes it can carry.
        pub code: String,
        /// For humans; never a stack trace.
        pub message: String,
    }
}
