//! The fixed client: the postmortem's "Code After", control by control.
//!
//! The retry decision, as in the postmortem's flow diagram — every `return` below that is not a
//! success is an exit the legacy client does not have:
//!
//! ```text
//! resolve(ctx) ─▶ deadline = min(ctx.deadline, now + budget.total)          (deadline_propagation)
//!   loop:
//!     retry?  ─▶ enough time after the pushback  no ─▶ NoBudget            [shed: no_budget]
//!                + the backoff?                                              (resilience.pushback)
//!             ─▶ reserve a retry-budget token    no ─▶ RetryBudgetExhausted [shed: retry_budget]
//!             ─▶ sleep full-jitter backoff (dropped with the caller)
//!     remaining - guard_band >= 120 ms?          no ─▶ NoBudget            [shed: no_budget]
//!     breaker admits?                            no ─▶ BreakerOpen         [shed: breaker_open]
//!     limiter has a permit (no queue)?           no ─▶ ConcurrencyLimited  [shed: concurrency_limit]
//!       (default: entity-service sizes the capacity and refuses what its pool cannot serve in
//!        time, a retryable 503; the limit here only bounds this process: limiter::Adapt::Callee)
//!     retry: spend the token, count the retry    (a shed or a caller gone above refunds it)
//!     attempt with min(remaining - guard_band, per_attempt), sending X-Request-Budget-Ms
//!       ok                                 ─▶ deposit a retry token, return
//!       timed out at the TOTAL deadline    ─▶ DeadlineExceeded (never retry a dead request)
//!       no answer at all (refused, closed before any byte of an answer)
//!                                          ─▶ failover: the next replica, now (not a retry; once
//!                                             per other replica)
//!       not retryable (500, 4xx, reset...) ─▶ return it
//!       retryable, attempts left           ─▶ loop
//! ```
//!
//! And the one thing with no line in that diagram: the caller going away. `resolve` is an
//! ordinary future; the caller dropping it drops the in-flight request, whose connection hyper
//! closes at once, so entity-service sees the hang-up and no further attempt is ever made.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{anyhow, ensure, Context as _};
use bytes::Bytes;
use lab_api::headers;
use lab_api::wire::{ResolveRequest, ResolveResponse};
use lab_core::call::CallContext;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::breaker::{Breaker, BreakerConfig, BreakerState};
use crate::budget::{Budget, MIN_ATTEMPT_BUDGET};
use crate::error::{Error, TransportStage};
use crate::limiter::{Adapt, Limiter, Signal};
use crate::metrics::{outcome, retry_class, shed_reason, ClientMetrics};
use crate::retry_budget::{Reservation, RetryBudget, RetryBudgetConfig};
use crate::retryability;
use crate::spans;

/// How much of a non-2xx body is read before the response is released (Go's
/// `io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))`): a drained body lets the connection
/// go back to the pool instead of being closed and re-handshaked — under load that alone can
/// double the connection count. Beyond 4 KiB we would rather burn the connection than the memory.
const DRAIN_LIMIT: usize = 4 << 10;
/// How much of a drained error body is kept for the error message.
const ERROR_BODY_KEPT: usize = 512;
/// Ceiling on TCP connect. On loopback or a cluster network a connect takes microseconds; if it
/// has not happened in a second the address is wrong or the peer is gone, and a retry to another
/// replica is the better use of the budget. (Also capped by `per_attempt`.)
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Everything the fixed client needs. No field has a default that a caller could inherit
/// unknowingly: the budget in particular is required (postmortem: `New(b Budget)`).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// entity-service replicas as `http://host:port`. Each attempt takes the next one round-robin,
    /// so a retry usually lands on a different replica than the one that just failed.
    pub base_urls: Vec<String>,
    /// The timing contract of this hop (`entity.resolve` in [`crate::budget::hop_table`]).
    /// Validated here; an invalid budget refuses to build a client.
    pub budget: Budget,
    /// The token bucket that caps what retries can add in aggregate.
    pub retry_budget: RetryBudgetConfig,
    /// When to stop calling a failing entity-service altogether.
    pub breaker: BreakerConfig,
    /// The static limit (`Controls::adaptive_limit: None`): attempts allowed in flight to
    /// entity-service at once; the excess is shed, never queued. A per-replica share of
    /// entity-service's connections for one fleet size (config says how). The adaptive limits
    /// start here.
    pub max_concurrency: usize,
    /// The adaptive limits' ceiling, and per endpoint in `base_urls` the callee policy's
    /// ([`Adapt::Callee`]): at least `max_concurrency`.
    pub max_concurrency_adaptive: usize,
}

/// Per-request switches, evaluated by the caller from runtime flags, so each control can be
/// measured alone against all of them (ablation). Turning a control off restores the legacy
/// behaviour for that one concern and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Controls {
    /// The postmortem's kill switch `retries.entity.enabled`: off = one attempt, no retries.
    pub retries_enabled: bool,
    /// On: the caller's deadline caps ours and `X-Request-Budget-Ms` goes on the wire. Off: only
    /// our own budget bounds the call and no header is sent (cancellation still works — it is a
    /// property of the future, not a switch).
    pub deadline_propagation: bool,
    /// On: every retry must withdraw a token; successes deposit. Off: the bucket is untouched.
    pub retry_budget: bool,
    /// On: full-jitter backoff. Off: the deterministic upper bound (lock-step, for ablation).
    pub jitter: bool,
    /// On: the breaker gates and observes this request. Off: it neither sees nor gates it.
    pub breaker: bool,
    /// On: each attempt needs a limiter permit (the named policies shed at once when full; the
    /// callee policy's ceiling waits within the attempt's budget). Off: unlimited.
    pub concurrency_limit: bool,
    /// With `concurrency_limit` on, how the limit is sized ([`crate::limiter::Adapt`]): by the
    /// callee's admission (the default), AIMD or Vegas; `None`: the static `max_concurrency`.
    pub adaptive_limit: Option<Adapt>,
    /// LAB-FIX(tenant-share), under [`Adapt::Callee`]: a tenant below its share of the ceiling
    /// is admitted when another tenant's attempts fill it ([`crate::limiter::Limiter::try_acquire_ceiling`]).
    /// Off: the ceiling is first come, first served.
    pub tenant_share: bool,
    /// LAB-FIX(pushback): a retry after an admission refusal that says how much too long
    /// entity-service's queue is (`x-lab-retry-pushback-ms`) waits that long before its jittered
    /// backoff, and is not made when that wait leaves no room for it. Off: the backoff alone
    /// (0-40 ms for the first retry: into the same queue).
    pub pushback: bool,
}

impl Default for Controls {
    /// Everything on: the fixed client as the postmortem shipped it.
    fn default() -> Self {
        Self {
            retries_enabled: true,
            deadline_propagation: true,
            retry_budget: true,
            jitter: true,
            breaker: true,
            concurrency_limit: true,
            adaptive_limit: Some(Adapt::Callee),
            tenant_share: true,
            pushback: true,
        }
    }
}

/// The resilient entity-service client. Share one per process (it is `Send + Sync`): the retry
/// budget, breaker and limiter are process-wide on purpose — they protect entity-service from
/// this process as a whole.
pub struct Client {
    /// Keeps connections alive between attempts; its own timeout is only a backstop (`total`),
    /// the real deadline is set on every attempt.
    http: reqwest::Client,
    /// `{base_url}/v1/resolve` for every replica, checked at construction.
    urls: Vec<String>,
    /// Round-robin cursor over `urls`, advanced per attempt.
    next: AtomicUsize,
    /// This hop's contract; every deadline below derives from it.
    budget: Budget,
    /// Full-jitter schedule between attempts.
    backoff: Backoff,
    /// Caps retries in aggregate across all requests of this process.
    retry_budget: RetryBudget,
    /// Stops calls to a dependency that is failing.
    breaker: Breaker,
    /// Caps attempts in flight; sheds the excess.
    limiter: Limiter,
    /// The families shared with the legacy client.
    metrics: ClientMetrics,
}

impl Client {
    /// A client, or an error saying which part of `config` is wrong (an invalid budget first).
    /// `metrics`: the process's entity-client families ([`ClientMetrics::register`], once).
    pub fn new(config: ClientConfig, metrics: ClientMetrics) -> anyhow::Result<Self> {
        // LAB-FIX(timeout-inversion): the budget is a required argument, validated here. There is
        // no package default to inherit: "a default timeout is a decision made by whoever edited
        // a file last, applied to callers they have never heard of." (The hop invariant between
        // budgets is checked by `HopTable::validate` at the caller's startup.)
        config
            .budget
            .validate()
            .context("entity client: refusing an invalid budget")?;
        config
            .retry_budget
            .validate()
            .map_err(|e| anyhow!("entity client: invalid retry budget: {e}"))?;
        config
            .breaker
            .validate()
            .map_err(|e| anyhow!("entity client: invalid breaker: {e}"))?;
        ensure!(
            config.max_concurrency >= 1,
            "entity client: max_concurrency must be >= 1"
        );
        ensure!(
            config.max_concurrency_adaptive >= config.max_concurrency,
            "entity client: max_concurrency_adaptive ({}) must be >= max_concurrency ({}): the \
             adaptive limit starts at max_concurrency and grows up to its ceiling",
            config.max_concurrency_adaptive,
            config.max_concurrency
        );
        ensure!(
            !config.base_urls.is_empty(),
            "entity client: at least one entity-service URL is required"
        );
        let urls = config
            .base_urls
            .iter()
            .map(|u| resolve_url(u))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let http = reqwest::Client::builder()
            // Backstop only (Go: `Timeout: b.Total`): every attempt carries its own, shorter
            // deadline. A client without any timeout is what the house style bans.
            .timeout(config.budget.total)
            .connect_timeout(CONNECT_TIMEOUT.min(config.budget.per_attempt))
            // Keep as many idle connections as may be in flight, so bursts reuse them.
            .pool_max_idle_per_host(config.max_concurrency_adaptive)
            // An internal hop: never through an HTTP(S)_PROXY from the environment.
            .no_proxy()
            .build()
            .context("entity client: building the HTTP client")?;
        Ok(Self {
            http,
            urls,
            next: AtomicUsize::new(0),
            backoff: Backoff::entity(),
            retry_budget: RetryBudget::new(
                config.retry_budget,
                Some(metrics.retry_budget_tokens()),
            ),
            breaker: Breaker::new(config.breaker, Some(metrics.breaker_state())),
            limiter: Limiter::new(
                config.max_concurrency,
                config.max_concurrency_adaptive,
                config.base_urls.len(),
                metrics.pool_in_use(),
                metrics.concurrency_limit(),
            )
            .with_waiting_gauge(metrics.pool_waiting()),
            budget: config.budget,
            metrics,
        })
    }

    /// The same client with another backoff schedule (a policy's; default [`Backoff::entity`]).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The adaptive concurrency limit's current size (also `entity_concurrency_limit` while it
    /// is the one in use).
    pub fn adaptive_limit(&self) -> usize {
        self.limiter.adaptive_limit()
    }

    /// Tokens left in the retry budget (also `entity_retry_budget_tokens`).
    pub fn retry_budget_tokens(&self) -> f64 {
        self.retry_budget.tokens()
    }

    /// What the breaker does with the next call (also `entity_breaker_state`).
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// The budget this client was built with.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Resolve one batch of spans, within the budget and the caller's deadline, or say honestly
    /// why not. Drop the future to cancel: nothing keeps running.
    pub async fn resolve(
        &self,
        ctx: &CallContext,
        req: &ResolveRequest,
        controls: &Controls,
    ) -> Result<ResolveResponse, Error> {
        // LAB-FIX(orphaned-work): the caller's trace continues here — this span is a child of
        // whatever the caller is in, and it ends when the caller's future does (or earlier).
        let span = tracing::info_span!(
            "entity.Resolve",
            doc_id = %req.doc_id,
            request_id = ctx.request_id.as_deref().unwrap_or(""),
            budget = %self.budget.name,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let result = self
            .resolve_in_budget(ctx, req, controls)
            .instrument(span.clone())
            .await;
        if let Err(e) = &result {
            spans::record_outcome(&span, None, Some(e));
        }
        result
    }

    async fn resolve_in_budget(
        &self,
        ctx: &CallContext,
        req: &ResolveRequest,
        controls: &Controls,
    ) -> Result<ResolveResponse, Error> {
        // The same orphan detection as the legacy client. Here the work is this very future, so
        // parent and child end in the same drop and otel_span_orphaned_total stays 0.
        let _spans = self.metrics.span_scope();
        let start = Instant::now();

        // LAB-FIX(timeout-inversion): clamp our ceiling on top of whatever the caller granted:
        // the EARLIER deadline wins, so a caller with 400 ms left still wins over our 1800 ms.
        // With deadline propagation off (ablation) only our own budget counts.
        let own_deadline = start + self.budget.total;
        let (deadline, caller_bound) = match ctx.deadline {
            Some(caller) if controls.deadline_propagation && caller < own_deadline => {
                (caller, true)
            }
            _ => (own_deadline, false),
        };
        // LAB-FIX(retry-amplification): `retries.entity.enabled` off means exactly one attempt.
        let max_attempts = if controls.retries_enabled {
            self.budget.max_attempts
        } else {
            1
        };
        let body = serde_json::to_vec(req)
            .map(Bytes::from)
            .map_err(|e| Error::Decode {
                message: format!("encoding the request: {e}"),
            })?;
        let floor = self.budget.guard_band + MIN_ATTEMPT_BUDGET;

        let mut sent: u32 = 0;
        let mut last: Option<Error> = None;
        // Failovers: an attempt that got no answer at all (refused, or closed before any byte of
        // an answer) goes to the next replica at once — no backoff, no retry token, not one of
        // `max_attempts` — at most once per other replica (once, with a single URL: behind a
        // Service address a new connection may reach another pod).
        let mut failovers: u32 = 0;
        let max_failovers = (self.urls.len() as u32).saturating_sub(1).max(1);
        // Set when the previous attempt got no answer: the replica it went to, so the next
        // attempt (failover or retry) goes to the one after it.
        let mut unanswered_by: Option<usize> = None;
        loop {
            // A retry's token and class, held from before the backoff until the retry really
            // goes out: everything that stops it first (a shed, the deadline, the caller leaving
            // during the sleep) drops the reservation, which refunds the token, and no retry is
            // counted — `entity_retries_total` counts retries that were sent.
            let mut retry: Option<(Option<Reservation<'_>>, &'static str)> = None;
            if let Some(prev) = last.take() {
                // LAB-FIX(no-jitter): full jitter, the upper bound doubling per retry.
                let jittered = self.backoff.delay(sent, controls.jitter);
                // LAB-FIX(pushback): entity-service refused the attempt before any work and said
                // by how much its queue is too long for it. A retry sooner than that meets the
                // same queue (the first retry's backoff is 0-40 ms; a queue that refuses is
                // hundreds of milliseconds too long), spends a retry token and a round trip, and
                // is refused again: the retry waits for the pushback first (gRPC's server
                // pushback, A6), then for its jittered backoff, so that the callers refused
                // together do not come back together. If that wait leaves no room for an
                // attempt, the request fails now (below), without a token spent.
                let pushback = prev.pushback().filter(|_| controls.pushback);
                let pause = pushback.unwrap_or_default() + jittered;
                let resume = Instant::now() + pause;
                // Refuse to sleep towards an attempt that could not start anyway: no token spent,
                // no time wasted, the caller learns at once.
                if deadline.saturating_duration_since(resume) < floor {
                    return Err(self.no_budget(deadline, sent));
                }
                // LAB-FIX(retry-amplification): a retry is a loan against recent successes.
                let token = if controls.retry_budget {
                    match self.retry_budget.reserve() {
                        Some(t) => Some(t),
                        None => {
                            self.metrics.record_shed(shed_reason::RETRY_BUDGET);
                            tracing::debug!(
                                attempts = sent,
                                "retry refused: retry budget exhausted"
                            );
                            return Err(Error::RetryBudgetExhausted {
                                attempts: sent,
                                last: Box::new(prev),
                            });
                        }
                    }
                } else {
                    None
                };
                tracing::debug!(
                    attempts = sent,
                    pause_ms = pause.as_millis() as u64,
                    pushback_ms = pushback.map(|p| p.as_millis() as u64),
                    error = %prev,
                    "retrying entity-service"
                );
                retry = Some((token, retry_class_of(&prev)));
                // LAB-FIX(orphaned-work): this sleep is part of the caller's future — dropped with
                // it — and can never run past the deadline (`time.Sleep` ignored both).
                tokio::time::sleep_until(resume.min(deadline)).await;
            }

            // LAB-FIX(timeout-inversion): each attempt gets min(remaining - guard_band,
            // per_attempt); none starts with less than MIN_ATTEMPT_BUDGET.
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining < floor {
                return Err(self.no_budget(deadline, sent));
            }
            let room = remaining - self.budget.guard_band;
            let mut attempt_budget = room.min(self.budget.per_attempt);
            // When the room left, not per_attempt, bounds this attempt, its timeout IS the total
            // deadline: what follows is DeadlineExceeded, not a retryable attempt timeout.
            let bounded_by_deadline = room <= self.budget.per_attempt;

            // LAB-FIX(pool-exhaustion) — first the breaker: don't start requests against a
            // dependency already known to be failing.
            let permit = if controls.breaker {
                match self.breaker.admit() {
                    Some(p) => Some(p),
                    None => {
                        self.metrics.record_shed(shed_reason::BREAKER_OPEN);
                        return Err(Error::BreakerOpen);
                    }
                }
            } else {
                None
            };
            // LAB-FIX(pool-exhaustion) — then the concurrency limit. The named policies (static,
            // AIMD, Vegas) shed at once; the default (the callee sizes capacity, this side caps
            // its own in-flight attempts) waits for a slot inside this attempt's budget, as Go's
            // transport waits for one of its 64 connections under the attempt's context (Code
            // After): the wait is the attempt's time, and it leaves the attempt at least
            // MIN_ATTEMPT_BUDGET for the request.
            let mut slot = if controls.concurrency_limit {
                let admitted = match controls.adaptive_limit {
                    Some(Adapt::Callee) => {
                        let waited_from = Instant::now();
                        let slot = self
                            .limiter
                            .acquire_ceiling_within(
                                req.tenant,
                                controls.tenant_share,
                                attempt_budget.saturating_sub(MIN_ATTEMPT_BUDGET),
                            )
                            .await;
                        attempt_budget = attempt_budget.saturating_sub(waited_from.elapsed());
                        slot
                    }
                    Some(how) => self.limiter.try_acquire_adapting(how),
                    None => self.limiter.try_acquire(),
                };
                match admitted {
                    Some(s) => Some(s),
                    None => {
                        self.metrics.record_shed(shed_reason::CONCURRENCY_LIMIT);
                        return Err(Error::ConcurrencyLimited);
                    }
                }
            } else {
                None
            };

            // Admitted by every control: a retry happens now, and only now is it one.
            if let Some((token, class)) = retry.take() {
                if let Some(t) = token {
                    t.spend();
                }
                self.metrics.record_retry(class);
            }
            sent += 1;
            // After an attempt that got no answer the next one goes to the next replica, not to
            // whichever one the shared cursor points at (concurrent requests move it, so it may
            // well be the same dead one again): a replica gone in a rolling restart or a crash
            // costs a request nothing but a second connect. (A first version decided this from
            // `last`, which the backoff had already taken, and failed over never — caught by
            // `resolve_fails_over_past_refusing_replicas_under_concurrency`.)
            let replica = unanswered_by
                .take()
                .map(|i| (i + 1) % self.urls.len())
                .unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed) % self.urls.len());
            let result = self
                .attempt(
                    ctx,
                    body.clone(),
                    attempt_budget,
                    controls,
                    sent - 1,
                    replica,
                )
                .await;
            if let Some(slot) = slot.as_mut() {
                // What the adaptive limit learns from this attempt. Cut by the caller's deadline
                // (less room than a whole attempt), a timeout says nothing about capacity.
                match &result {
                    Ok(_) => slot.signal(Signal::Answered),
                    Err(Error::AttemptTimedOut { .. }) if bounded_by_deadline => {}
                    Err(e) if retryability::is_dependency_failure(e) => {
                        slot.signal(Signal::Overloaded)
                    }
                    Err(Error::Upstream { .. }) => slot.signal(Signal::Answered),
                    Err(_) => {}
                }
            }
            drop(slot);

            let err = match result {
                Ok(answer) => {
                    if let Some(p) = permit {
                        p.success();
                    }
                    if controls.retry_budget {
                        self.retry_budget.deposit();
                    }
                    return Ok(answer);
                }
                Err(e) => e,
            };
            if let Some(p) = permit {
                if retryability::is_admission_refusal(&err) {
                    // LAB-FIX(pool-exhaustion): the callee refused its excess before any work;
                    // it is full, not failing (retryability::is_admission_refusal). Unreported.
                } else if retryability::is_dependency_failure(&err) {
                    p.failure();
                } else if matches!(err, Error::Upstream { .. }) {
                    // A 4xx: entity-service is healthy, the request was wrong.
                    p.success();
                }
                // Anything else (a decode error) says nothing about health: dropped unreported.
            }
            if matches!(err, Error::AttemptTimedOut { .. }) && bounded_by_deadline {
                // Our caller gave up, or our total budget expired: the answer is worthless now.
                // The attempt was cut (connection closed) — work entity-service can stop.
                self.metrics.record_abandoned();
                return Err(Error::DeadlineExceeded {
                    elapsed: start.elapsed(),
                    attempts: sent,
                    caller_bound,
                });
            }
            if err.is_unanswered() {
                unanswered_by = Some(replica);
                if failovers < max_failovers {
                    // No answer was lost: the same attempt, to the next replica, now. The loop's
                    // top still checks the deadline, the breaker and the limiter.
                    failovers += 1;
                    self.metrics.record_failover();
                    tracing::debug!(replica, error = %err, "failing over to the next replica");
                    continue;
                }
            }
            // LAB-FIX(retries-5xx): one function decides; a 500 ends here after one request.
            if !err.is_retryable() || sent - failovers >= max_attempts {
                return Err(err);
            }
            last = Some(err);
        }
    }

    fn no_budget(&self, deadline: Instant, attempts: u32) -> Error {
        self.metrics.record_shed(shed_reason::NO_BUDGET);
        let remaining = deadline.saturating_duration_since(Instant::now());
        tracing::debug!(
            attempts,
            remaining_ms = remaining.as_millis() as u64,
            "not starting an attempt: out of budget"
        );
        Error::NoBudget {
            remaining,
            attempts,
        }
    }

    /// One request, bounded by `budget`, in its span `entity.Resolve.attempt.{n}`. Dropping this
    /// future (caller gone) drops the request and closes its connection — and ends the span; the
    /// guard records that as `cancelled` + abandoned.
    async fn attempt(
        &self,
        ctx: &CallContext,
        body: Bytes,
        budget: Duration,
        controls: &Controls,
        n: u32,
        replica: usize,
    ) -> Result<ResolveResponse, Error> {
        let url = &self.urls[replica];
        let span = spans::attempt(n, url);
        span.record("budget_ms", budget.as_millis() as u64);
        // LAB-FIX(orphaned-work): the request is built and awaited inside the caller's future —
        // no `tokio::spawn`, no detached task. This is Go's `NewRequestWithContext(ctx, ...)`:
        // "the whole fix, in one identifier". The trace context goes with it (`traceparent`).
        let mut rb = self
            .http
            .post(url)
            .headers(lab_core::telemetry::propagation::headers_for(&span))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(id) = &ctx.request_id {
            rb = rb.header(headers::REQUEST_ID, id);
        }
        if let Some(d) = &ctx.observe_user_deadline {
            rb = rb.header(headers::OBSERVE_USER_DEADLINE, d);
        }
        if controls.deadline_propagation {
            // Tell entity-service how long we will wait, so it can shed work it cannot deliver
            // in time — "the other half of the contract".
            rb = rb.header(headers::REQUEST_BUDGET_MS, budget.as_millis().to_string());
        }
        // Observation only: when this attempt's budget starts, for entity-service to measure
        // the part of it spent before its handler runs.
        rb = rb.header(headers::OBSERVE_SENT_UNIX_US, headers::unix_us_now());
        let guard = AttemptGuard::start(&self.metrics);
        let result = match tokio::time::timeout(budget, exchange(rb))
            .instrument(span.clone())
            .await
        {
            Ok(r) => r,
            Err(_) => Err(Error::AttemptTimedOut { after: budget }),
        };
        guard.finish(outcome_of(&result));
        match &result {
            Ok(_) => spans::record_outcome(&span, Some(200), None),
            Err(e @ Error::Upstream { status, .. }) => {
                spans::record_outcome(&span, Some(*status), Some(e))
            }
            Err(e) => spans::record_outcome(&span, None, Some(e)),
        }
        result
    }
}

/// Send, then read the answer; non-2xx bodies are drained (bounded) so the connection is reused.
async fn exchange(rb: reqwest::RequestBuilder) -> Result<ResolveResponse, Error> {
    let resp = rb.send().await.map_err(|e| {
        // No response head arrived: refused, or closed before any byte of an answer.
        let stage = if e.is_connect() {
            TransportStage::Connect
        } else if lab_core::http::unanswered(&e) {
            TransportStage::BeforeAnswer
        } else {
            TransportStage::MidAnswer
        };
        transport_error(e, stage)
    })?;
    let status = resp.status();
    if !status.is_success() {
        // entity-service names the error-table row of its answer; the answer goes up as that row.
        let origin = resp
            .headers()
            .get(lab_contract::ORIGIN_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(lab_contract::errors::parse_origin);
        let pushback = headers::retry_pushback(
            resp.headers()
                .get(headers::RETRY_PUSHBACK_MS)
                .map(|v| v.as_bytes()),
        );
        let body = drain(resp).await;
        return Err(Error::Upstream {
            status: status.as_u16(),
            body,
            origin,
            pushback,
        });
    }
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| transport_error(e, TransportStage::MidAnswer))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Decode {
        message: e.to_string(),
    })
}

/// Read up to [`DRAIN_LIMIT`] bytes of an error body, keeping the first [`ERROR_BODY_KEPT`].
async fn drain(mut resp: reqwest::Response) -> String {
    let mut kept = Vec::new();
    let mut read = 0usize;
    while read < DRAIN_LIMIT {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                read += chunk.len();
                let room = ERROR_BODY_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            // End of body (connection reusable) or a broken one (it will be closed anyway).
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

fn transport_error(e: reqwest::Error, stage: TransportStage) -> Error {
    Error::Transport {
        stage,
        message: error_chain(&e),
    }
}

/// `reqwest::Error`'s Display hides the cause ("error sending request"); the chain names it.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

fn outcome_of(result: &Result<ResolveResponse, Error>) -> &'static str {
    match result {
        Ok(_) => outcome::OK,
        Err(Error::AttemptTimedOut { .. }) | Err(Error::DeadlineExceeded { .. }) => {
            outcome::TIMEOUT
        }
        Err(Error::Upstream { status, .. }) => outcome::for_status(*status),
        Err(Error::Decode { .. }) => outcome::DECODE,
        Err(_) => outcome::TRANSPORT,
    }
}

fn retry_class_of(err: &Error) -> &'static str {
    match err {
        Error::AttemptTimedOut { .. } => retry_class::TIMEOUT,
        Error::Transport {
            stage: TransportStage::Connect,
            ..
        } => retry_class::CONNECT,
        Error::Upstream { status, .. } => retry_class::for_status(*status),
        _ => retry_class::TRANSPORT,
    }
}

/// `{base}/v1/resolve`, refusing anything that is not an absolute http(s) URL with a host.
fn resolve_url(base: &str) -> anyhow::Result<String> {
    let url = reqwest::Url::parse(base)
        .with_context(|| format!("entity client: invalid entity-service URL {base:?}"))?;
    ensure!(
        matches!(url.scheme(), "http" | "https") && url.host_str().is_some(),
        "entity client: entity-service URL {base:?} must be http://host:port"
    );
    Ok(format!("{}/v1/resolve", base.trim_end_matches('/')))
}

/// Records one attempt's outcome; dropped unfinished — the caller went away mid-attempt — it
/// records `cancelled` and one abandoned attempt (entity-service's work on it is now for nobody,
/// and the dropped request has just told it so by closing the connection).
struct AttemptGuard<'a> {
    metrics: &'a ClientMetrics,
    started: Instant,
    finished: bool,
}

impl<'a> AttemptGuard<'a> {
    fn start(metrics: &'a ClientMetrics) -> Self {
        metrics.record_attempt_start();
        Self {
            metrics,
            started: Instant::now(),
            finished: false,
        }
    }

    fn finish(mut self, outcome: &str) {
        self.finished = true;
        self.metrics.record_attempt(outcome, self.started.elapsed());
    }
}

impl Drop for AttemptGuard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.metrics
                .record_attempt(outcome::CANCELLED, self.started.elapsed());
            self.metrics.record_abandoned();
        }
    }
}
