//! The legacy client's errors: what Go's `client.Do` and the retry loop could return.

use std::time::Duration;

use lab_contract::Failure;

/// Why the legacy `resolve` did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client's timeout (10 s by default) expired — while waiting for a per-host slot,
    /// for the headers, or for the body, as Go's `Client.Timeout` covers all three.
    #[error("Post {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers after {}ms)", .timeout.as_millis())]
    Timeout { url: String, timeout: Duration },
    /// The same timeout, expired while the call still waited for one of the host's connection
    /// slots: nothing was sent. Go's `Client.Timeout` covers the wait for a connection too, and
    /// reports it just as a timeout — so the loop retries it like one (faithfully); only the
    /// counting tells them apart (`entity_requests_total{outcome="slot_timeout"}`).
    #[error("Post {url:?}: net/http: request canceled while waiting for connection (Client.Timeout exceeded after {}ms)", .timeout.as_millis())]
    SlotTimeout { url: String, timeout: Duration },
    /// Connect failure, reset, closed connection.
    #[error("Post {url:?}: {message}")]
    Transport {
        url: String,
        message: String,
        /// The request never reached entity-service (refused, connect timeout).
        connect: bool,
    },
    /// entity-service answered with a non-2xx status.
    #[error("entity-service: status {status}")]
    Upstream {
        status: u16,
        /// Empty for 5xx: like `resp.Body.Close()`, the body is dropped unread.
        body: String,
        /// The error-table row entity-service named in `x-lab-error-origin` (the header arrives
        /// with the status, before the unread body).
        origin: Option<&'static Failure>,
    },
    /// A 2xx whose body is not a `ResolveResponse`.
    #[error("entity-service: decoding the answer: {message}")]
    Decode { message: String },
    /// Every attempt failed. The postmortem's log line: `entity-service: exhausted 3 attempts`,
    /// `elapsed_ms: 30412` — thirty seconds on a path whose caller gave up after three.
    #[error(
        "entity-service: exhausted {attempts} attempts (elapsed_ms: {}): {last}",
        .elapsed.as_millis()
    )]
    Exhausted {
        attempts: u32,
        elapsed: Duration,
        last: Box<Error>,
    },
    /// The detached task died (panicked) before answering.
    #[error("entity-service: detached resolve task failed: {message}")]
    Detached { message: String },
}

impl Error {
    /// Would the legacy loop retry this? One truth table: [`crate::retryability::is_retryable`].
    pub fn is_retryable(&self) -> bool {
        crate::retryability::is_retryable(self)
    }

    /// The error-table row the orchestrator answers with — the same rows as the fixed client's
    /// where the failures are the same (a per-attempt timeout, an undecodable answer, a broken
    /// connection), and entity-service's own row when it named one. After every attempt failed,
    /// the last failure is the answer.
    pub fn failure(&self) -> &'static Failure {
        use lab_contract::errors as t;
        match self {
            Error::Timeout { .. } => &t::OR_ATTEMPT_TIMED_OUT,
            Error::SlotTimeout { .. } => &t::OR_SLOT_TIMEOUT,
            Error::Transport { connect: true, .. } => &t::OR_ENTITY_UNREACHABLE,
            Error::Transport { connect: false, .. } => &t::OR_ENTITY_TRANSPORT,
            Error::Upstream {
                origin: Some(f), ..
            } => f,
            Error::Upstream { origin: None, .. } => &t::OR_ENTITY_UNLABELLED,
            Error::Decode { .. } => &t::OR_ENTITY_DECODE,
            Error::Exhausted { last, .. } => last.failure(),
            Error::Detached { .. } => &t::OR_INTERNAL,
        }
    }

    /// A stable, machine-readable code (the error-table row's; shared with the fixed client).
    pub fn code(&self) -> &'static str {
        self.failure().code
    }
}
