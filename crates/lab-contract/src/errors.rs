//! The error table: every failure a hop of the synchronous path can answer, in ONE place.
//!
//! The postmortem's error rate was one number (34%) that said nothing about who decided each
//! failure; the lab's verdicts need the opposite. Every error response of every hop is built from
//! a row of [`TABLE`]: the row fixes the HTTP status, the error code in the JSON body, whether the
//! condition is transient (a caller *may* try again later, with backoff and a budget) and what it
//! means. The row travels up the path with the error in the [`ORIGIN_HEADER`]
//! (`x-lab-error-origin: entity-service/db_pool_exhausted`), so each hop above answers with the
//! SAME status and code instead of re-interpreting a status ("everything is 503, retry later")
//! or forwarding an inner body verbatim. Every service counts what it answered as
//! `lab_errors_total{hop, origin, status}` — `hop` and `origin` name the row, not the service
//! counting — so at the gateway the 5xx a user saw add up, exactly, to the sum of their origins.
//!
//! Read it with the hop table ([`crate::budget`]): the budgets say when each hop gives up, this
//! table says what it then answers.
//!
//! | hop | code | status | transient | |
//! |---|---|---|---|---|
//! | every hop | `invalid_request` `payload_too_large` `unsupported_media_type` `not_found` `method_not_allowed` | 400 413 415 404 405 | no | the request is wrong |
//! | every hop | `caller_gone` | 499 | no | the caller hung up first (counted; nothing was sent) |
//! | every hop | `internal`, `unlabelled` | 500 | no | a bug (`unlabelled`: an error not built from this table) |
//! | edge-gateway | `unauthorized` | 401 | no | |
//! | edge-gateway | `rate_limited` | 429 | yes | |
//! | edge-gateway | `auth_unavailable`, `auth_busy`, `no_ready_upstream` | 503 | yes | `auth_busy`: the flood guard, not the key store |
//! | edge-gateway | `deadline_exceeded`, `upstream_timeout` | 504 | no | |
//! | edge-gateway | `upstream_failed`, `upstream_unlabelled` | 502 | no | |
//! | orchestrator | `deadline_exceeded`, `no_budget` | 504 | no | the fixed client's own budget decisions |
//! | orchestrator | `attempt_timed_out`, `slot_timeout` | 504 | yes | both clients' per-attempt clocks |
//! | orchestrator | `breaker_open`, `retry_budget_exhausted`, `concurrency_limited`, `entity_unreachable` | 503 | yes | sheds and a dead address |
//! | orchestrator | `entity_transport`, `entity_decode`, `entity_bad_response`, `entity_unlabelled` | 502 | no | entity-service's answer was broken |
//! | entity-service | `budget_refused`, `query_cancelled` | 504 | no | the caller's budget could not cover / ended the work |
//! | entity-service | `db_pool_exhausted`, `db_unavailable`, `injected_fault_503` | 503 | yes | |
//! | entity-service | `query_failed`, `injected_fault_500` | 500 | no | |
//!
//! "Transient" is the table's opinion for any caller; the fixed entity client uses it for
//! entity-service's answers (so a `budget_refused` 504 is not retried with even less budget),
//! the legacy client ignores it (LAB-BUG(retries-5xx): it retries every 5xx).

use std::fmt;

/// The header an error response carries up the path: `<hop>/<code>` of its row.
pub const ORIGIN_HEADER: &str = "x-lab-error-origin";

/// The hops of the synchronous path, as they appear in metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hop {
    EdgeGateway,
    Orchestrator,
    EntityService,
}

impl Hop {
    pub const ALL: [Hop; 3] = [Hop::EdgeGateway, Hop::Orchestrator, Hop::EntityService];

    /// The service name: the `hop` label, the binary, the compose service, `OTEL_SERVICE_NAME`.
    pub fn as_str(self) -> &'static str {
        match self {
            Hop::EdgeGateway => "edge-gateway",
            Hop::Orchestrator => "orchestrator",
            Hop::EntityService => "entity-service",
        }
    }

    pub fn parse(s: &str) -> Option<Hop> {
        Hop::ALL.into_iter().find(|h| h.as_str() == s)
    }
}

impl fmt::Display for Hop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row: a failure decided at `hop`, answered with `status` and `code` by every hop it
/// passes through.
#[derive(Debug, PartialEq, Eq)]
pub struct Failure {
    /// The hop that decided it (the `hop` label).
    pub hop: Hop,
    /// The error code in the body, and the `origin` label; unique per hop.
    pub code: &'static str,
    /// The HTTP status every hop answers for it.
    pub status: u16,
    /// Transient: the same request may succeed later (congestion, a shed, a dead address), so a
    /// caller may retry with backoff and within a budget. Not transient: retrying changes nothing
    /// (a wrong request, a bug) or is the definition of abandoned work (a spent budget).
    pub retryable: bool,
    /// What happened and what the caller must do — also the message users get in place of an
    /// inner hop's text.
    pub means: &'static str,
}

impl Failure {
    /// `<hop>/<code>`, the [`ORIGIN_HEADER`] value.
    pub fn origin(&self) -> String {
        format!("{}/{}", self.hop.as_str(), self.code)
    }

    pub fn is_server_error(&self) -> bool {
        self.status >= 500
    }
}

/// The row `hop` answers with `code`.
pub fn lookup(hop: Hop, code: &str) -> Option<&'static Failure> {
    TABLE
        .iter()
        .copied()
        .find(|f| f.hop == hop && f.code == code)
}

/// The row an [`ORIGIN_HEADER`] value names (`None` for anything not in the table).
pub fn parse_origin(value: &str) -> Option<&'static Failure> {
    let (hop, code) = value.trim().split_once('/')?;
    lookup(Hop::parse(hop)?, code)
}

/// Rows every hop has: the shared HTTP plumbing (`lab-core`'s JSON body extractor, fallbacks and
/// request middleware) answers them wherever it runs.
pub const GENERIC_CODES: &[&str] = &[
    "invalid_request",
    "payload_too_large",
    "unsupported_media_type",
    "not_found",
    "method_not_allowed",
    "caller_gone",
    "internal",
    "unlabelled",
];

macro_rules! failures {
    ($( $(#[$doc:meta])* $name:ident = ($hop:ident, $code:literal, $status:literal, $retry:literal, $means:literal); )*) => {
        $( $(#[$doc])* pub static $name: Failure = Failure {
            hop: Hop::$hop, code: $code, status: $status, retryable: $retry, means: $means,
        }; )*
        /// Every row, gateway first, then down the path.
        pub static TABLE: &[&Failure] = &[ $( &$name ),* ];
    };
}

failures! {
    // --- edge-gateway: what the public door decides ------------------------------------------
    GW_INVALID_REQUEST = (EdgeGateway, "invalid_request", 400,
        false, "the request is malformed or breaks a documented limit: fix it; retrying changes nothing");
    GW_PAYLOAD_TOO_LARGE = (EdgeGateway, "payload_too_large", 413,
        false, "the request body is over the gateway's limit");
    GW_UNSUPPORTED_MEDIA_TYPE = (EdgeGateway, "unsupported_media_type", 415,
        false, "send the body as JSON with Content-Type: application/json");
    GW_NOT_FOUND = (EdgeGateway, "not_found", 404, false, "no such route");
    GW_METHOD_NOT_ALLOWED = (EdgeGateway, "method_not_allowed", 405,
        false, "this route does not accept that method");
    GW_CALLER_GONE = (EdgeGateway, "caller_gone", 499,
        false, "the client hung up before the answer was ready (counted, nothing was sent)");
    GW_INTERNAL = (EdgeGateway, "internal", 500, false, "a bug in the gateway; not expected");
    GW_UNLABELLED = (EdgeGateway, "unlabelled", 500,
        false, "an error response not built from the error table (a bug in the lab)");
    GW_UNAUTHORIZED = (EdgeGateway, "unauthorized", 401,
        false, "missing, malformed, unknown or revoked API key");
    /// The body was still arriving when the request's 3 s budget ended (a slow upload): the
    /// gateway let the connection go rather than hold a buffer for it.
    GW_REQUEST_TIMEOUT = (EdgeGateway, "request_timeout", 408,
        false, "the request body did not arrive within the request's 3 s budget: send it faster, or a smaller one");
    GW_RATE_LIMITED = (EdgeGateway, "rate_limited", 429,
        true, "the tenant is over its plan's requests per second: retry after Retry-After");
    GW_AUTH_UNAVAILABLE = (EdgeGateway, "auth_unavailable", 503,
        true, "API keys cannot be verified right now (the key store is unreachable): retry later with backoff");
    /// The flood guard (`auth.flood_guard`): a key id seen for the first time found every
    /// first-time lookup taken for 200 ms. Apart from `auth_unavailable` — the key store answers;
    /// a flood of new ids, not a database failure, decided it (issue 24).
    GW_AUTH_BUSY = (EdgeGateway, "auth_busy", 503,
        true, "too many never-seen API keys are being verified at once (the flood guard); the key store is up: retry later with backoff");
    GW_NO_READY_UPSTREAM = (EdgeGateway, "no_ready_upstream", 503,
        true, "no orchestrator replica is in rotation: retry later with backoff");
    /// The gateway's own 3 s budget (`gateway.request`) ran out; the upstream call was dropped.
    GW_DEADLINE_EXCEEDED = (EdgeGateway, "deadline_exceeded", 504,
        false, "the request did not complete within its 3 s budget; the work below was cancelled at the gateway");
    /// Legacy mode: the last of the gateway's attempts at the orchestrator hit its 1 s slice.
    GW_UPSTREAM_TIMEOUT = (EdgeGateway, "upstream_timeout", 504,
        false, "the last attempt at the orchestrator timed out before the budget ended");
    GW_UPSTREAM_FAILED = (EdgeGateway, "upstream_failed", 502,
        false, "the connection to the orchestrator failed or broke mid-answer");
    GW_UPSTREAM_UNLABELLED = (EdgeGateway, "upstream_unlabelled", 502,
        false, "the orchestrator answered an error that names no known origin (a contract bug between the hops)");

    // --- orchestrator: its entity clients' decisions and what entity-service's answers were ----
    OR_INVALID_REQUEST = (Orchestrator, "invalid_request", 400,
        false, "the internal request is malformed (the gateway validates first: a contract bug)");
    OR_PAYLOAD_TOO_LARGE = (Orchestrator, "payload_too_large", 413,
        false, "the internal request body is over the orchestrator's limit");
    OR_UNSUPPORTED_MEDIA_TYPE = (Orchestrator, "unsupported_media_type", 415,
        false, "the internal request is not JSON");
    OR_NOT_FOUND = (Orchestrator, "not_found", 404, false, "no such route");
    OR_METHOD_NOT_ALLOWED = (Orchestrator, "method_not_allowed", 405,
        false, "this route does not accept that method");
    /// One document's work is bounded (issue 28): past `entity.max_spans` distinct spans it is
    /// refused before any lookup, whatever the caches hold.
    OR_TOO_MANY_SPANS = (Orchestrator, "too_many_spans", 422,
        false, "the document names more distinct entities than one request may resolve: split it into smaller documents");
    OR_CALLER_GONE = (Orchestrator, "caller_gone", 499,
        false, "the gateway dropped the request (its budget or attempt ended) before the answer");
    OR_INTERNAL = (Orchestrator, "internal", 500, false, "a bug in the orchestrator; not expected");
    OR_UNLABELLED = (Orchestrator, "unlabelled", 500,
        false, "an error response not built from the error table (a bug in the lab)");
    /// Fixed client: the total deadline (the caller's, or entity.resolve's 1.8 s) passed mid-attempt.
    OR_DEADLINE_EXCEEDED = (Orchestrator, "deadline_exceeded", 504,
        false, "the entity lookups did not finish within the request's budget; the attempt in flight was cut");
    /// Fixed client: less than the minimum attempt budget (120 ms) was left, so nothing was sent.
    OR_NO_BUDGET = (Orchestrator, "no_budget", 504,
        false, "too little of the request's budget was left to start another entity lookup");
    /// Both clients: the last attempt hit its own per-attempt clock with no attempt left (fixed:
    /// min(remaining, 700 ms); legacy: the 10 s package default "while awaiting headers").
    OR_ATTEMPT_TIMED_OUT = (Orchestrator, "attempt_timed_out", 504,
        true, "entity-service did not answer within the per-attempt timeout");
    /// Legacy client: the 10 s clock expired while the attempt waited for one of the host's
    /// connection slots — nothing was sent (Go's "request canceled while waiting for connection").
    OR_SLOT_TIMEOUT = (Orchestrator, "slot_timeout", 504,
        true, "every connection slot to entity-service stayed taken until the timeout; nothing was sent");
    OR_BREAKER_OPEN = (Orchestrator, "breaker_open", 503,
        true, "the breaker is shedding calls to a failing entity-service; nothing was sent");
    OR_RETRY_BUDGET_EXHAUSTED = (Orchestrator, "retry_budget_exhausted", 503,
        true, "a retry was due but the retry budget had no token left; nothing more was sent");
    OR_CONCURRENCY_LIMITED = (Orchestrator, "concurrency_limited", 503,
        true, "the concurrency limit in front of entity-service was full (and stayed full for the attempt's budget, at the default ceiling); nothing sent");
    OR_ENTITY_UNREACHABLE = (Orchestrator, "entity_unreachable", 503,
        true, "no connection to entity-service could be made (refused, connect timeout)");
    OR_ENTITY_TRANSPORT = (Orchestrator, "entity_transport", 502,
        false, "the connection to entity-service broke mid-exchange");
    OR_ENTITY_DECODE = (Orchestrator, "entity_decode", 502,
        false, "entity-service answered 2xx with a body that is not a resolve response");
    OR_ENTITY_BAD_RESPONSE = (Orchestrator, "entity_bad_response", 502,
        false, "entity-service answered a different number of results than spans sent");
    OR_ENTITY_UNLABELLED = (Orchestrator, "entity_unlabelled", 502,
        false, "entity-service answered an error that names no known origin (a contract bug between the hops)");

    // --- entity-service: PostgreSQL's side -----------------------------------------------------
    ES_INVALID_REQUEST = (EntityService, "invalid_request", 400,
        false, "the resolve request is malformed or over a limit (a contract bug)");
    ES_PAYLOAD_TOO_LARGE = (EntityService, "payload_too_large", 413,
        false, "the resolve request body is over the limit");
    ES_UNSUPPORTED_MEDIA_TYPE = (EntityService, "unsupported_media_type", 415,
        false, "the resolve request is not JSON");
    ES_NOT_FOUND = (EntityService, "not_found", 404, false, "no such route");
    ES_METHOD_NOT_ALLOWED = (EntityService, "method_not_allowed", 405,
        false, "this route does not accept that method");
    ES_CALLER_GONE = (EntityService, "caller_gone", 499,
        false, "the entity client dropped the request (cut attempt, or its caller left) before the answer");
    ES_INTERNAL = (EntityService, "internal", 500, false, "a bug in entity-service; not expected");
    ES_UNLABELLED = (EntityService, "unlabelled", 500,
        false, "an error response not built from the error table (a bug in the lab)");
    /// The caller's `X-Request-Budget-Ms` is below the recent cost of this work: refused unstarted.
    ES_BUDGET_REFUSED = (EntityService, "budget_refused", 504,
        false, "the caller's remaining budget cannot cover this work at its recent cost; refused before any work");
    /// `statement_timeout` (derived from the caller's budget) cancelled the query (SQLSTATE 57014).
    ES_QUERY_CANCELLED = (EntityService, "query_cancelled", 504,
        false, "the query was cancelled when the caller's budget ran out");
    ES_QUERY_FAILED = (EntityService, "query_failed", 500,
        false, "a database query failed (a bug or a schema problem; retrying runs it again)");
    ES_DB_POOL_EXHAUSTED = (EntityService, "db_pool_exhausted", 503,
        true, "no PostgreSQL connection became free within the pool's wait bound");
    ES_DB_UNAVAILABLE = (EntityService, "db_unavailable", 503,
        true, "PostgreSQL is unreachable or the connection failed");
    ES_INJECTED_FAULT_503 = (EntityService, "injected_fault_503", 503,
        true, "a game-day fault: fault.entity.error_fraction with error_status 503");
    ES_INJECTED_FAULT_500 = (EntityService, "injected_fault_500", 500,
        false, "a game-day fault: fault.entity.error_fraction with error_status 500");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn error_table_rows_are_unique_per_hop_and_round_trip_through_the_header() {
        let mut seen = BTreeSet::new();
        for f in TABLE {
            assert!(
                seen.insert((f.hop, f.code)),
                "{} appears twice in the error table",
                f.origin()
            );
            assert_eq!(parse_origin(&f.origin()), Some(*f));
            assert!(
                (400..=599).contains(&f.status),
                "{}: {} is not an error status",
                f.origin(),
                f.status
            );
            assert!(
                f.code
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}: codes are snake_case label values",
                f.origin()
            );
            assert!(!f.means.is_empty());
        }
    }

    #[test]
    fn error_table_has_the_generic_rows_at_every_hop() {
        for hop in Hop::ALL {
            for code in GENERIC_CODES {
                assert!(lookup(hop, code).is_some(), "{hop}/{code} is missing");
            }
        }
    }

    #[test]
    fn error_table_statuses_follow_one_rule_per_class() {
        // Client errors are never transient except the rate limit; 502 (a broken answer) and
        // 500 (a bug) never are; a spent budget (504 decided by a budget) is never retried.
        for f in TABLE {
            match f.status {
                429 => assert!(f.retryable, "{}", f.origin()),
                400..=499 => assert!(!f.retryable, "{}", f.origin()),
                500 | 502 => assert!(!f.retryable, "{}", f.origin()),
                503 => assert!(f.retryable, "{}", f.origin()),
                _ => {}
            }
        }
        for budget in [
            &GW_DEADLINE_EXCEEDED,
            &OR_DEADLINE_EXCEEDED,
            &OR_NO_BUDGET,
            &ES_BUDGET_REFUSED,
            &ES_QUERY_CANCELLED,
        ] {
            assert_eq!(budget.status, 504, "{}", budget.origin());
            assert!(!budget.retryable, "{}", budget.origin());
        }
    }

    #[test]
    fn parse_origin_refuses_what_is_not_in_the_table() {
        for bad in [
            "",
            "entity-service",
            "entity-service/",
            "nowhere/db_pool_exhausted",
            "entity-service/no_such_code",
            "orchestrator/budget_refused",
        ] {
            assert_eq!(parse_origin(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_origin(" entity-service/db_pool_exhausted "),
            Some(&ES_DB_POOL_EXHAUSTED)
        );
    }
}
