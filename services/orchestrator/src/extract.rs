//! `POST /internal/extract`: split, consult the cache, resolve the misses, assemble.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use lab_api::events::{DocIngested, Mention};
use lab_api::headers;
use lab_api::wire::{
    ExtractResponse, ExtractedEntity, InternalExtractRequest, Resolution, ResolveRequest,
};
use lab_core::http::{ApiError, JsonBody};
use lab_kafka::EventProducer;

use futures::StreamExt;
use lab_core::call::CallContext;
use lab_flags::Snapshot;
use prometheus::IntCounter;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::time::Instant;
use tracing::Instrument;

use crate::cache::{CacheKey, ResolutionCache};
use crate::entity::{mode_for, EntityClients, Mode};
use crate::plan::plan;

#[derive(Clone)]
pub struct AppState {
    pub cache: Arc<ResolutionCache>,
    pub entity: Arc<EntityClients>,
    pub batch_size: usize,
    /// `entity.batches_in_flight`: a document's calls at once.
    pub batches_in_flight: usize,
    /// `entity.max_spans`: distinct spans one document may ask for.
    pub max_spans: usize,
    /// `orchestrator.dispatch` total from the hop table: what this hop promises its caller.
    pub dispatch_total: Duration,
    /// `doc.ingested` publishing (None: off).
    pub events: Option<Arc<EventProducer>>,
    /// Legacy handlers whose caller hung up before the answer, counted at the hang-up; each
    /// runs on to the end (`orchestrator_handlers_orphaned_total`).
    pub orphaned: IntCounter,
    /// Every legacy handler's task: drained (bounded) when the replica stops.
    pub handlers: tokio_util::task::TaskTracker,
}

/// Counts a legacy handler whose caller left before its answer: the future awaiting the
/// handler's task is dropped with the connection, and this with it, unarmed. It also marks the
/// hang-up for the work running on (`CallContext::caller_gone`): what ends after it is an orphan
/// (`otel_span_orphaned_total`), as the work under a dropped handler was before.
struct CallerWaiting {
    orphaned: IntCounter,
    gone: Arc<AtomicBool>,
    answered: bool,
}

impl Drop for CallerWaiting {
    fn drop(&mut self) {
        if !self.answered {
            self.gone.store(true, Ordering::Release);
            self.orphaned.inc();
        }
    }
}

pub async fn extract(
    State(st): State<AppState>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<InternalExtractRequest>,
) -> Result<Json<ExtractResponse>, ApiError> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let flags = st.entity.flags().snapshot();
    let now = Instant::now();
    let request_id = header(headers::REQUEST_ID);
    let mode = mode_for(&flags, request_id.as_deref());
    let deadline = match mode {
        // LAB-BUG(timeout-inversion): the legacy path has no deadline of its own and reads none;
        // only its client's 10 s package default bounds an attempt.
        Mode::Legacy => None,
        // LAB-FIX(timeout-inversion): the earlier of the caller's budget (when deadline
        // propagation is on) and this hop's own total.
        Mode::Resilient => {
            let own = now + st.dispatch_total;
            // Read only while deadlines propagate (ablation: off ignores it, as before); a
            // budget that cannot be read is then the caller's mistake, a 400.
            let caller = if flags.enabled("resilience.deadline_propagation") {
                headers::request_budget(
                    headers
                        .get(headers::REQUEST_BUDGET_MS)
                        .map(|v| v.as_bytes()),
                )
                .map_err(ApiError::bad_request)?
                .map(|b| now + b)
            } else {
                None
            };
            Some(caller.map_or(own, |c| c.min(own)))
        }
    };
    let mut ctx = CallContext {
        deadline,
        request_id,
        observe_user_deadline: header(headers::OBSERVE_USER_DEADLINE),
        caller_gone: None,
    };
    match mode {
        // LAB-BUG(go-handler): the postmortem's orchestrator was a Go net/http handler. Nothing
        // cancels a handler goroutine when its caller hangs up, and the legacy client ignores the
        // request's context, so the handler runs to the end: it waits for the orphaned resolve,
        // fills the LRU with what it brought back, publishes its event and writes its answer into
        // a closed connection. An axum handler is a future dropped with its connection (the
        // cache fill after an orphaned resolve would never run); spawning the handler's work and
        // awaiting it gives it a goroutine's lifetime. What it holds meanwhile (the document, its
        // answers) is held as a goroutine holds its buffers.
        Mode::Legacy => {
            let gone = Arc::new(AtomicBool::new(false));
            ctx.caller_gone = Some(gone.clone());
            let mut waiting = CallerWaiting {
                orphaned: st.orphaned.clone(),
                gone,
                answered: false,
            };
            let st_handlers = st.handlers.clone();
            let work = handle(st, req, ctx, flags, now).instrument(tracing::Span::current());
            let out = st_handlers
                .spawn(work)
                .await
                .map_err(|e| ApiError::internal(format!("the extract handler's task failed: {e}")));
            waiting.answered = true;
            out?
        }
        // LAB-FIX(go-handler): the fixed path is cancelled with its caller: when the gateway
        // hangs up, the resolve, its retries and everything after them stop.
        Mode::Resilient => handle(st, req, ctx, flags, now).await,
    }
}

/// The handler's work, after the request is read and its deadline set.
async fn handle(
    st: AppState,
    req: InternalExtractRequest,
    ctx: CallContext,
    flags: Arc<Snapshot>,
    now: Instant,
) -> Result<Json<ExtractResponse>, ApiError> {
    let units = plan(&req.text);
    if units.len() > st.max_spans {
        return Err(ApiError::from_failure(
            &lab_contract::errors::OR_TOO_MANY_SPANS,
            format!(
                "{} distinct spans; one document may ask for {}",
                units.len(),
                st.max_spans
            ),
        ));
    }
    let mut answers: Vec<Option<Option<Resolution>>> = Vec::with_capacity(units.len());
    let mut misses: Vec<usize> = Vec::new();
    for (i, unit) in units.iter().enumerate() {
        let hit = st.cache.get(&key(&req, &unit.query.normalized));
        if hit.is_none() {
            misses.push(i);
        }
        answers.push(hit);
    }

    // Misses go out in batches, `batches_in_flight` at once: a real document's few calls all
    // together (its latency is its slowest), a large one's a few at a time, so one document
    // cannot take every slot in front of entity-service (issue 28).
    let calls: Vec<_> = misses
        .chunks(st.batch_size)
        .map(|chunk| {
            let body = ResolveRequest {
                doc_id: req.doc_id.clone(),
                tenant: req.tenant_id,
                locale: req.locale.clone(),
                spans: chunk.iter().map(|&i| units[i].query.clone()).collect(),
            };
            let (entity, ctx, flags) = (&st.entity, &ctx, &flags);
            async move { entity.resolve(flags, ctx, &body).await.map(|r| (chunk, r)) }
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(calls)
        .buffer_unordered(st.batches_in_flight)
        .collect()
        .await;
    for result in results {
        let (chunk, resp) = result?;
        if resp.results.len() != chunk.len() {
            return Err(ApiError::from_failure(
                &lab_contract::errors::OR_ENTITY_BAD_RESPONSE,
                "entity-service answered a different number of results than spans sent",
            ));
        }
        for (&i, answer) in chunk.iter().zip(resp.results) {
            st.cache
                .put(key(&req, &units[i].query.normalized), answer.clone());
            answers[i] = Some(answer);
        }
    }

    let mut entities = Vec::new();
    let mut unresolved = 0;
    for (unit, answer) in units.iter().zip(answers) {
        match answer.flatten() {
            Some(res) => {
                entities.extend(
                    unit.occurrences
                        .iter()
                        .map(|(start, end, text)| ExtractedEntity {
                            entity: res.entity.clone(),
                            confidence: res.confidence,
                            start: *start,
                            end: *end,
                            mention: text.clone(),
                        }),
                )
            }
            None => unresolved += unit.occurrences.len(),
        }
    }
    entities.sort_by_key(|e| e.start);
    if let Some(events) = &st.events {
        let event = DocIngested {
            event_id: ctx
                .request_id
                .clone()
                .unwrap_or_else(|| format!("orchestrator-{:032x}", rand::random::<u128>())),
            doc_id: req.doc_id.clone(),
            tenant_id: req.tenant_id,
            locale: req.locale.clone(),
            mentions: mentions(&entities),
            unresolved,
            spans: units.len(),
            cache_hits: units.len() - misses.len(),
            duration_ms: now.elapsed().as_secs_f64() * 1e3,
            extracted_at_unix_ms: unix_ms(),
        };
        // Never waits on the broker: queued or dropped-and-counted, then on with the answer.
        let payload = serde_json::to_vec(&event).expect("an event always serializes");
        // The trace continues on the asynchronous path: the worker's span joins this request's
        // trace through the record's `traceparent` header (nothing is added while traces are off).
        let mut trace: Vec<(String, String)> = Vec::new();
        lab_core::telemetry::propagation::inject_with(|k, v| trace.push((k.to_string(), v)));
        let mut record_headers: Vec<(&str, &str)> = vec![(headers::REQUEST_ID, &event.event_id)];
        record_headers.extend(trace.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        events.publish(&req.doc_id, &payload, &record_headers);
    }
    Ok(Json(ExtractResponse {
        doc_id: req.doc_id,
        entities,
        unresolved,
    }))
}

/// Each resolved entity once with its number of mentions, by entity id.
fn mentions(entities: &[ExtractedEntity]) -> Vec<Mention> {
    let mut counts: std::collections::BTreeMap<i64, u32> = Default::default();
    for e in entities {
        *counts.entry(e.entity.id).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(entity_id, count)| Mention { entity_id, count })
        .collect()
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn key(req: &InternalExtractRequest, normalized: &str) -> CacheKey {
    CacheKey {
        tenant: req.tenant_id,
        locale: req.locale.clone(),
        normalized: normalized.to_string(),
    }
}
