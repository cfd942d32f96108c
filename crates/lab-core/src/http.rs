//! JSON errors everywhere: `{"error": {"code": "...", "message": "..."}}`.
//!
//! Clients of a document API parse bodies; a plain-text error or an HTML 404 is a second failure
//! on top of the first. Codes are stable and say what the caller can do about the error.
//!
//! Every error is a row of the error table (`lab_contract::errors`): [`ApiError::from_failure`]
//! takes the row's status and code and remembers the row, and the response carries it as an
//! extension ([`ErrorInfo`]) for [`crate::metrics::track`], which counts `lab_errors_total` and
//! puts the row on the wire (`x-lab-error-origin`) for the hop above. An `ApiError` built from a
//! bare code (the generic constructors below) is a row of whichever hop answers it.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use lab_api::wire::ErrorBody;
use lab_contract::Failure;
use serde::de::DeserializeOwned;

/// An error response. `code` is machine-readable and stable.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// The error-table row this answers, when it was decided elsewhere or named explicitly;
    /// `None`: the row `code` names at the hop that answers.
    pub origin: Option<&'static Failure>,
    /// Sent as [`lab_api::headers::RETRY_PUSHBACK_MS`] (rounded up to whole milliseconds): the
    /// soonest a retry could succeed, when the service knows it (an admission refusal).
    pub retry_pushback: Option<std::time::Duration>,
}

/// What an error response was, for the middleware that counts it: attached to every response
/// [`ApiError`] builds.
#[derive(Debug, Clone, Copy)]
pub struct ErrorInfo {
    pub code: &'static str,
    pub origin: Option<&'static Failure>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            origin: None,
            retry_pushback: None,
        }
    }
    /// The error `f` (of this hop, or of a hop below passed through): its status and code.
    pub fn from_failure(f: &'static Failure, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::from_u16(f.status).expect("the error table holds valid statuses"),
            code: f.code,
            message: message.into(),
            origin: Some(f),
            retry_pushback: None,
        }
    }
    /// The same error, telling the caller not to retry sooner than `after` (server pushback).
    pub fn with_retry_pushback(mut self, after: std::time::Duration) -> Self {
        self.retry_pushback = Some(after);
        self
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
    pub fn deadline_exceeded(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded", message)
    }
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let info = ErrorInfo {
            code: self.code,
            origin: self.origin,
        };
        let mut resp = (self.status, Json(ErrorBody::new(self.code, self.message))).into_response();
        if let Some(after) = self.retry_pushback {
            let ms = after.as_micros().div_ceil(1000).to_string();
            resp.headers_mut().insert(
                lab_api::headers::RETRY_PUSHBACK_MS,
                axum::http::HeaderValue::from_str(&ms).expect("digits are a valid header value"),
            );
        }
        resp.extensions_mut().insert(info);
        resp
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

/// `Json<T>` whose rejections are JSON errors: 415 for a missing or wrong content type, 413 for
/// a body over the route's limit, 400 (with serde's field path and position) for malformed JSON,
/// a missing field, a wrong type or an unknown field.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(JsonBody(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    match status {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            status,
            "unsupported_media_type",
            "send the body as JSON with Content-Type: application/json",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            status,
            "payload_too_large",
            "the request body exceeds this endpoint's size limit",
        ),
        _ => ApiError::bad_request(rejection.body_text()),
    }
}

/// Fallback for unknown routes.
pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

/// Fallback for a known route called with the wrong method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not accept that method",
    )
}

/// Did a client's HTTP exchange fail on an established connection before any byte of an answer
/// arrived — the connection closed (hyper: "connection closed before message completed"),
/// reset, or broken while the request was written? Walks `err`'s source chain (reqwest →
/// hyper-util → hyper → io).
///
/// This is the keep-alive race's signature: a server that is shutting down closes an idle
/// connection at the instant the client writes a request on it. No answer was lost, so the
/// request can go to another replica (RFC 9110 §9.2.2, for idempotent requests). Apply it only
/// to an error from sending (before the response head), never to one from reading a body, and
/// check connect errors and timeouts first: they are not this.
pub fn unanswered(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            ) {
                return true;
            }
        }
        cur = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pushback_goes_on_the_wire_in_whole_milliseconds_rounded_up() {
        let row = &lab_contract::errors::ES_DB_POOL_EXHAUSTED;
        let plain = ApiError::from_failure(row, "full").into_response();
        assert!(plain
            .headers()
            .get(lab_api::headers::RETRY_PUSHBACK_MS)
            .is_none());
        let pushed = ApiError::from_failure(row, "full")
            .with_retry_pushback(std::time::Duration::from_micros(393_750))
            .into_response();
        assert_eq!(pushed.status(), StatusCode::SERVICE_UNAVAILABLE);
        let header = pushed.headers()[lab_api::headers::RETRY_PUSHBACK_MS].as_bytes();
        assert_eq!(header, b"394", "never sooner than the service said");
        assert_eq!(
            lab_api::headers::retry_pushback(Some(header)),
            Some(std::time::Duration::from_millis(394))
        );
    }
}
