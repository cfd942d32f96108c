//! What a caller hands down with every outbound call.

/// The caller's side of one outbound call: its deadline and the ids that travel with it.
///
/// Deadlines are `tokio::time::Instant` so tests can run them under paused time.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// When the caller stops waiting (from its `X-Request-Budget-Ms`), if it said.
    pub deadline: Option<tokio::time::Instant>,
    /// `X-Request-Id`, propagated unchanged.
    pub request_id: Option<String>,
    /// The observation-only end-user deadline header value, forwarded unchanged.
    pub observe_user_deadline: Option<String>,
    /// Set when the caller hung up, for work that runs on without it (a Go handler's): what
    /// ends after it counts as an orphan. Observed only — nothing is cancelled by it. `None`:
    /// the work is the caller's future and ends with it.
    pub caller_gone: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl CallContext {
    /// Time left before the caller's deadline (`None`: the caller set none).
    pub fn remaining(&self) -> Option<std::time::Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(tokio::time::Instant::now()))
    }
}
