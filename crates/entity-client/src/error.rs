//! The fixed client's errors, split by what the CALLER must do about them.
//!
//! Nothing here is "the caller cancelled": a caller that goes away drops the `resolve` future,
//! and a dropped future returns nothing and runs nothing more.

use std::time::Duration;

use lab_contract::Failure;

/// Why `resolve` did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The total deadline — ours (`budget.total`) or the caller's, whichever came first — passed
    /// during an attempt. Don't retry: the answer would arrive for nobody.
    #[error(
        "entity-service: deadline exceeded after {attempts} attempt(s) in {}ms ({} deadline)",
        .elapsed.as_millis(),
        if *.caller_bound { "the caller's" } else { "our budget's" }
    )]
    DeadlineExceeded {
        /// Time from the start of `resolve`.
        elapsed: Duration,
        /// Attempts sent, the cut one included.
        attempts: u32,
        /// `true` when the caller's deadline was the earlier one (deadline propagation at work).
        caller_bound: bool,
    },
    /// One attempt hit its per-attempt deadline while the total budget still had room. May be
    /// retried (and was, if the budgets allowed); returned as the last attempt's error.
    #[error("entity-service: attempt timed out after {}ms", .after.as_millis())]
    AttemptTimedOut {
        /// The attempt's own budget: `min(remaining - guard_band, per_attempt)`.
        after: Duration,
    },
    /// The breaker is shedding: entity-service is known to be failing; nothing was sent.
    #[error("entity-service: breaker shedding, request not sent")]
    BreakerOpen,
    /// A retry was due but the retry budget had no token: retries are switched off until
    /// successes refill it. Nothing more was sent.
    #[error(
        "entity-service: retry budget exhausted after {attempts} attempt(s); last error: {last}"
    )]
    RetryBudgetExhausted {
        /// Attempts sent before the refusal.
        attempts: u32,
        /// What failed before the refused retry.
        last: Box<Error>,
    },
    /// The concurrency limit in front of entity-service is full (shed at once by the static and
    /// adaptive policies; at the callee policy's ceiling, after waiting out the attempt's budget
    /// for a slot); nothing sent.
    #[error("entity-service: concurrency limit reached, request shed")]
    ConcurrencyLimited,
    /// entity-service answered with a non-2xx status.
    #[error("entity-service answered {status}: {body}")]
    Upstream {
        status: u16,
        /// The first 512 characters of the drained error body.
        body: String,
        /// The error-table row entity-service named (`x-lab-error-origin`); `None` when it named
        /// none, or one the table does not know.
        origin: Option<&'static Failure>,
        /// entity-service's server pushback (`x-lab-retry-pushback-ms`, on an admission refusal):
        /// the soonest a retry could fit. `None`: not sent, or not readable.
        pushback: Option<Duration>,
    },
    /// No complete HTTP answer: connect failure, reset, closed connection.
    #[error("entity-service unreachable: {message}")]
    Transport {
        /// How far the exchange got before the connection failed.
        stage: TransportStage,
        message: String,
    },
    /// Less than the minimum attempt budget was left (after the guard band), so no attempt was
    /// started: "fail honestly, fail early". Don't retry.
    #[error(
        "entity-service: {}ms left after {attempts} attempt(s), below the {}ms minimum attempt \
         budget; not starting another",
        .remaining.as_millis(),
        lab_contract::budget::MIN_ATTEMPT_BUDGET.as_millis()
    )]
    NoBudget {
        /// Time left before the deadline, guard band not yet subtracted.
        remaining: Duration,
        /// Attempts sent before giving up.
        attempts: u32,
    },
    /// A 2xx whose body is not a `ResolveResponse` (or a request we could not encode).
    #[error("entity-service: undecodable exchange: {message}")]
    Decode { message: String },
}

/// How far an exchange got before its connection failed: what decides whether it may be sent
/// again elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportStage {
    /// No connection (refused, connect timeout): the request never reached entity-service.
    Connect,
    /// Connected, but the connection closed or was reset before any byte of an answer arrived —
    /// the keep-alive race (a replica shutting down closes an idle connection just as a request
    /// is written to it), or a replica gone mid-request. No answer can be lost by sending it
    /// elsewhere, and `/v1/resolve` is a read (RFC 9110 §9.2.2: a client may resend an
    /// idempotent request after a connection closed before the response).
    BeforeAnswer,
    /// An answer had begun and the connection broke during it: entity-service did the work, and
    /// its answer is lost. Not sent again.
    MidAnswer,
}

impl Error {
    /// The server pushback this attempt's answer carried, if any.
    pub fn pushback(&self) -> Option<Duration> {
        match self {
            Error::Upstream { pushback, .. } => *pushback,
            _ => None,
        }
    }

    /// Did this attempt get no answer at all, so that sending it to another replica loses
    /// nothing (a failover, not a retry)?
    pub fn is_unanswered(&self) -> bool {
        matches!(
            self,
            Error::Transport {
                stage: TransportStage::Connect | TransportStage::BeforeAnswer,
                ..
            }
        )
    }

    /// May this failure be retried? One truth table for the whole crate:
    /// [`crate::retryability::is_retryable`].
    pub fn is_retryable(&self) -> bool {
        crate::retryability::is_retryable(self)
    }

    /// The error-table row the caller answers with: this client's own decisions are rows of the
    /// orchestrator (the hop this client runs in); entity-service's answers pass through as the
    /// row entity-service named.
    pub fn failure(&self) -> &'static Failure {
        use lab_contract::errors as t;
        match self {
            Error::DeadlineExceeded { .. } => &t::OR_DEADLINE_EXCEEDED,
            Error::AttemptTimedOut { .. } => &t::OR_ATTEMPT_TIMED_OUT,
            Error::BreakerOpen => &t::OR_BREAKER_OPEN,
            Error::RetryBudgetExhausted { .. } => &t::OR_RETRY_BUDGET_EXHAUSTED,
            Error::ConcurrencyLimited => &t::OR_CONCURRENCY_LIMITED,
            Error::Upstream {
                origin: Some(f), ..
            } => f,
            Error::Upstream { origin: None, .. } => &t::OR_ENTITY_UNLABELLED,
            Error::Transport {
                stage: TransportStage::Connect,
                ..
            } => &t::OR_ENTITY_UNREACHABLE,
            Error::Transport { .. } => &t::OR_ENTITY_TRANSPORT,
            Error::NoBudget { .. } => &t::OR_NO_BUDGET,
            Error::Decode { .. } => &t::OR_ENTITY_DECODE,
        }
    }

    /// A stable, machine-readable code (the error-table row's): for logs and error bodies.
    pub fn code(&self) -> &'static str {
        self.failure().code
    }
}
