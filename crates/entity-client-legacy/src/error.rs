//! The legacy client's errors: what Go's `client.Do` and the retry loop could return.

use std::time::Duration;

/// Why the legacy `resolve` did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client's timeout (10 s by default) expired — while waiting for a per-host slot,
    /// for the headers, or for the body, as Go's `Client.Timeout` covers all three.
    #[error("Post {url:?}: context deadline exceeded (Client.Timeout exceeded after {}ms)", .timeout.as_millis())]
    Timeout { url: String, timeout: Duration },
    /// Connect failure, reset, closed connection.
    #[error("Post {url:?}: {message}")]
    Transport { url: String, message: String },
    /// entity-service answered with a non-2xx status.
    #[error("entity-service: status {status}")]
    Upstream {
        status: u16,
        /// Empty for 5xx: like `resp.Body.Close()`, the body is dropped unread.
        body: String,
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

    /// A stable, machine-readable code (same vocabulary as the fixed client where they overlap).
    pub fn code(&self) -> &'static str {
        match self {
            Error::Timeout { .. } => "timeout",
            Error::Transport { .. } => "transport_error",
            Error::Upstream { .. } => "upstream_error",
            Error::Decode { .. } => "decode_error",
            Error::Exhausted { .. } => "attempts_exhausted",
            Error::Detached { .. } => "internal",
        }
    }
}
