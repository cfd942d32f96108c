//! What the legacy client retries — one function, like the fixed client's, with the wrong table.

use crate::error::Error;

// LAB-BUG(retries-5xx): `if resp.StatusCode >= 500 { ...; continue }` — "retries 500s: amplifies
// bugs, not blips". A 500 is usually a deterministic server bug on this payload; retrying it runs
// the bug three times and triples the error logs everyone is reading during the incident. And
// every transport error is retried too, the client's own 10 s timeout included: a dependency that
// is slow gets the same slow request two more times.
/// Transport errors (timeouts included) and ANY 5xx: retry. 4xx: return at once.
pub fn is_retryable(err: &Error) -> bool {
    match err {
        Error::Timeout { .. } | Error::SlotTimeout { .. } | Error::Transport { .. } => true,
        Error::Upstream { status, .. } => *status >= 500,
        Error::Decode { .. } | Error::Exhausted { .. } | Error::Detached { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn upstream(status: u16) -> Error {
        Error::Upstream {
            status,
            body: String::new(),
            origin: None,
        }
    }

    #[test]
    fn retryability_retries_every_5xx_and_every_transport_error() {
        for s in [500, 502, 503, 504, 599] {
            assert!(is_retryable(&upstream(s)), "{s}");
        }
        for s in [400, 404, 409, 429] {
            assert!(!is_retryable(&upstream(s)), "{s}");
        }
        assert!(is_retryable(&Error::Timeout {
            url: "u".into(),
            timeout: Duration::from_secs(10)
        }));
        assert!(is_retryable(&Error::Transport {
            url: "u".into(),
            message: "reset".into(),
            connect: false,
        }));
        assert!(is_retryable(&Error::SlotTimeout {
            url: "u".into(),
            timeout: Duration::from_secs(10)
        }));
        // Even a 5xx that names a spent budget: this client never reads the table.
        assert!(is_retryable(&Error::Upstream {
            status: 504,
            body: String::new(),
            origin: Some(&lab_contract::errors::ES_BUDGET_REFUSED),
        }));
    }
}
