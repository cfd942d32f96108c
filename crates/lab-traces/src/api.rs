//! The query API `labctl trace` reads (JSON over HTTP, loopback only):
//!
//! - `GET /api/traces?sort=slowest|orphaned|recent&limit=N` → `[Summary]`
//! - `GET /api/traces/{trace_id}` → `[SpanRecord]` by start time (404 if not in the window)
//! - `GET /api/stats` → [`crate::store::Stats`]
//!
//! And a client for it ([`Client`]), so labctl and the tests speak it the same way.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use crate::model::{SpanRecord, Summary};
use crate::store::{Sort, Stats, Store};

/// At most this many summaries a call: a list is for reading, not for dumping the store.
const MAX_LIMIT: usize = 1_000;

#[derive(Deserialize)]
struct ListQuery {
    sort: Option<String>,
    limit: Option<usize>,
}

pub fn router(store: Arc<Store>) -> Router {
    Router::new()
        .route("/api/traces", get(list))
        .route("/api/traces/{id}", get(trace))
        .route("/api/stats", get(stats))
        .with_state(store)
}

async fn list(State(store): State<Arc<Store>>, Query(q): Query<ListQuery>) -> Response {
    let sort = match q.sort.as_deref().unwrap_or("slowest").parse::<Sort>() {
        Ok(s) => s,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    let limit = q.limit.unwrap_or(20).min(MAX_LIMIT);
    Json(store.list(sort, limit)).into_response()
}

async fn trace(State(store): State<Arc<Store>>, Path(id): Path<String>) -> Response {
    match store.trace(&id) {
        Some(spans) => Json(spans).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("trace {id} is not in the receiver's window (it keeps the most recent ones)"),
        )
            .into_response(),
    }
}

async fn stats(State(store): State<Arc<Store>>) -> Json<Stats> {
    Json(store.stats())
}

/// A client of the API at `base` (`http://127.0.0.1:14318`).
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base: &str) -> Self {
        Client {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                // Loopback: anything slower than this is a receiver that is not there.
                .timeout(std::time::Duration::from_secs(10))
                .build()
                .expect("a plain HTTP client builds"),
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let url = format!("{}{path}", self.base);
        let r = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("the trace API at {}: {e}", self.base))?;
        let status = r.status();
        let body = r.text().await?;
        anyhow::ensure!(status.is_success(), "{url}: {status}: {}", body.trim());
        serde_json::from_str(&body).map_err(|e| anyhow::anyhow!("{url}: {e}"))
    }

    pub async fn list(&self, sort: Sort, limit: usize) -> anyhow::Result<Vec<Summary>> {
        let sort = serde_json::to_value(sort)?;
        let sort = sort.as_str().unwrap_or("slowest");
        self.json(&format!("/api/traces?sort={sort}&limit={limit}"))
            .await
    }

    pub async fn trace(&self, trace_id: &str) -> anyhow::Result<Vec<SpanRecord>> {
        anyhow::ensure!(
            !trace_id.is_empty() && trace_id.chars().all(|c| c.is_ascii_hexdigit()),
            "{trace_id:?} is not a trace id (32 hex digits)"
        );
        self.json(&format!("/api/traces/{trace_id}")).await
    }

    pub async fn stats(&self) -> anyhow::Result<Stats> {
        self.json("/api/stats").await
    }
}
