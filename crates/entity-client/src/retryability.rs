//! What is worth retrying — decided in ONE function, [`is_retryable`], the way linkerd keeps a
//! single `retryable_error`. The retry loop, [`Error::is_retryable`] and the breaker's idea of a
//! "failure" all start from here, so there is one truth table to read.
//!
//! LAB-FIX(retries-5xx): "retry congestion, never retry bugs". The legacy client retried every
//! 5xx. A 500 usually means a deterministic bug on a specific payload; retrying it runs the bug
//! three times and triples the logs being read during the incident. 429, 503 and 504 mean
//! congestion or transient unavailability — worth another try, with a budget and jitter.
//!
//! | failure | retryable | why |
//! |---|---|---|
//! | an answer naming its error-table row (`x-lab-error-origin`) | as the row says | the callee knows why it failed: a `budget_refused` or `query_cancelled` 504 is a spent budget (retrying with less is abandoned work), `db_pool_exhausted` 503 is congestion (lab-contract's error table) |
//! | 429, 503, 504 without a known row | yes | congestion / transient unavailability |
//! | 500, 502, other 5xx | no | most likely a deterministic server bug (502 is not in the postmortem's list either) |
//! | other 4xx | no | the request is wrong; it will be wrong again |
//! | no answer at all: refused, or closed before any byte of an answer | failed over first | sent again to the next replica at once, as a failover, not a retry (`Client::resolve`); once every other replica was tried, a connect error is retried (it never reached entity-service) and a closed connection is not |
//! | connect error (refused, connect timeout), failovers used up | yes | the request never reached entity-service |
//! | per-attempt timeout (`AttemptTimedOut`) | yes | the total budget may still have room |
//! | other transport error (reset mid-response) | no | entity-service may have done the work; the total budget is better spent failing honestly |
//! | undecodable 2xx body | no | a contract bug |
//! | total deadline (`DeadlineExceeded`), `NoBudget` | never | retrying a dead request is the definition of abandoned work |
//! | the caller's cancellation | never | not even an error: the future is dropped and nothing runs any more |
//! | our own refusals (`BreakerOpen`, `RetryBudgetExhausted`, `ConcurrencyLimited`) | no | retrying a shed defeats the shedding |

use crate::error::{Error, TransportStage};

/// 429, 503 and 504: the statuses that signal congestion rather than a bug.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 429 | 503 | 504)
}

/// The truth table above.
pub fn is_retryable(err: &Error) -> bool {
    match err {
        Error::AttemptTimedOut { .. } => true,
        Error::Upstream {
            origin: Some(f), ..
        } => f.retryable,
        Error::Upstream { status, .. } => is_retryable_status(*status),
        Error::Transport { stage, .. } => *stage == TransportStage::Connect,
        Error::DeadlineExceeded { .. }
        | Error::NoBudget { .. }
        | Error::BreakerOpen
        | Error::RetryBudgetExhausted { .. }
        | Error::ConcurrencyLimited
        | Error::Decode { .. } => false,
    }
}

/// Did entity-service's admission refuse this attempt before any work because its PostgreSQL
/// pool could not serve it within the budget (`db_pool_exhausted`)? The dependency is full and
/// protecting itself, not failing: the refusal cost it microseconds and another replica (or the
/// same one a moment later) may serve the retry. The breaker counts it neither way, so that a
/// callee shedding its excess does not make the client shed everything (measured in the replay's
/// scale-up: 2,404 of 2,468 failed requests were `breaker_open` once such refusals counted);
/// the retry budget still bounds the retries it draws, and the adaptive limits still read it as
/// overload.
pub fn is_admission_refusal(err: &Error) -> bool {
    matches!(err, Error::Upstream { origin: Some(f), .. }
        if **f == lab_contract::errors::ES_DB_POOL_EXHAUSTED)
}

/// Does this attempt error say the dependency is unhealthy (a breaker failure)? 5xx (500
/// included: a dependency failing half its calls with 500s needs relief too, it just gains
/// nothing from retries), 429, timeouts and transport errors. A 4xx other than 429 means the
/// dependency is fine and the request was wrong; a decode error is a contract bug.
pub fn is_dependency_failure(err: &Error) -> bool {
    match err {
        Error::Upstream { status, .. } => *status >= 500 || *status == 429,
        Error::AttemptTimedOut { .. }
        | Error::DeadlineExceeded { .. }
        | Error::Transport { .. } => true,
        _ => false,
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
            pushback: None,
        }
    }

    fn named(f: &'static lab_contract::Failure) -> Error {
        Error::Upstream {
            status: f.status,
            body: String::new(),
            origin: Some(f),
            pushback: None,
        }
    }

    #[test]
    fn retryability_follows_the_row_entity_service_names() {
        use lab_contract::errors as t;
        // Same status, different answers: a spent budget is never retried, congestion is.
        assert!(!is_retryable(&named(&t::ES_BUDGET_REFUSED)));
        assert!(!is_retryable(&named(&t::ES_QUERY_CANCELLED)));
        assert!(is_retryable(&upstream(504)), "an unnamed 504 is congestion");
        assert!(is_retryable(&named(&t::ES_DB_POOL_EXHAUSTED)));
        assert!(!is_retryable(&named(&t::ES_QUERY_FAILED)));
        // A spent budget at entity-service is still a sign of a slow dependency.
        assert!(is_dependency_failure(&named(&t::ES_BUDGET_REFUSED)));
        assert!(!is_admission_refusal(&named(&t::ES_BUDGET_REFUSED)));
        // A full pool's refusal is an admission refusal; an unnamed 503 is not.
        assert!(is_admission_refusal(&named(&t::ES_DB_POOL_EXHAUSTED)));
        assert!(!is_admission_refusal(&upstream(503)));
        assert!(!is_admission_refusal(&named(&t::ES_DB_UNAVAILABLE)));
    }

    #[test]
    fn retryability_truth_table() {
        let cases: Vec<(Error, bool)> = vec![
            (upstream(429), true),
            (upstream(503), true),
            (upstream(504), true),
            (upstream(500), false),
            (upstream(502), false),
            (upstream(501), false),
            (upstream(400), false),
            (upstream(404), false),
            (upstream(409), false),
            (
                Error::Transport {
                    stage: TransportStage::Connect,
                    message: "connection refused".into(),
                },
                true,
            ),
            (
                Error::Transport {
                    stage: TransportStage::BeforeAnswer,
                    message: "connection closed before message completed".into(),
                },
                false,
            ),
            (
                Error::Transport {
                    stage: TransportStage::MidAnswer,
                    message: "connection reset".into(),
                },
                false,
            ),
            (
                Error::AttemptTimedOut {
                    after: Duration::from_millis(700),
                },
                true,
            ),
            (
                Error::DeadlineExceeded {
                    elapsed: Duration::from_millis(1720),
                    attempts: 3,
                    caller_bound: false,
                },
                false,
            ),
            (
                Error::NoBudget {
                    remaining: Duration::from_millis(90),
                    attempts: 2,
                },
                false,
            ),
            (Error::BreakerOpen, false),
            (Error::ConcurrencyLimited, false),
            (
                Error::RetryBudgetExhausted {
                    attempts: 1,
                    last: Box::new(upstream(503)),
                },
                false,
            ),
            (
                Error::Decode {
                    message: "expected value".into(),
                },
                false,
            ),
        ];
        for (err, want) in cases {
            assert_eq!(is_retryable(&err), want, "{err:?}");
            assert_eq!(
                err.is_retryable(),
                want,
                "Error::is_retryable agrees: {err:?}"
            );
        }
    }

    #[test]
    fn retryability_500_is_a_failure_but_not_retryable() {
        assert!(is_dependency_failure(&upstream(500)));
        assert!(!is_retryable(&upstream(500)));
        assert!(!is_dependency_failure(&upstream(404)));
        assert!(is_dependency_failure(&upstream(429)));
    }
}
