//! The server side: the HTTP answer a service gives its own callers when a policy it runs refused
//! or gave up, so that they back off as the policy did instead of retrying into it.

use stormguard_core::{CallError, Duration};

/// The longest `Retry-After` sent: a refusal that only an operator can end (an isolated breaker)
/// still tells callers to come back within the hour rather than never.
const MAX_RETRY_AFTER_SECS: u64 = 3_600;

/// The response for a call that did not succeed, with a small JSON body:
///
/// - refused (a breaker open or ramping, a budget, a limiter or bulkhead full):
///   `503 Service Unavailable` with `Retry-After` in whole seconds, rounded up (at least 1, at
///   most an hour) and `{"error":"rejected","reason":"breaker_open","retry_after_ms":4200}`;
/// - timed out or past its deadline: `504 Gateway Timeout`, `{"error":"timed_out"}` or
///   `{"error":"deadline_exceeded"}`;
/// - failed (the dependency's own error stood): `502 Bad Gateway`, `{"error":"failed"}`;
/// - cancelled: `503`, `{"error":"cancelled"}` (the caller has usually gone; the status is for
///   logs).
///
/// The body never carries the dependency's error: that is for your logs, not your callers.
///
/// ```
/// use stormguard_std::{Rejection, CallError, Duration, RefusalReason};
/// use stormguard_std::server::error_response;
///
/// let refused: CallError<std::io::Error> = CallError::Rejected {
///     rejection: Rejection {
///         reason: RefusalReason::BreakerOpen,
///         retry_after: Duration::from_millis(4_200),
///         pause: Duration::ZERO,
///         last: None,
///         attempts: 0,
///     },
///     last: None,
/// };
/// let response = error_response(&refused);
/// assert_eq!(response.status(), 503);
/// assert_eq!(response.headers()["retry-after"], "5");
/// assert_eq!(
///     response.body(),
///     r#"{"error":"rejected","reason":"breaker_open","retry_after_ms":4200}"#
/// );
/// ```
#[must_use]
pub fn error_response<E>(error: &CallError<E>) -> http::Response<String> {
    use http::StatusCode;
    let (status, body, retry_after) = match error {
        CallError::Rejected { rejection, .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                r#"{{"error":"rejected","reason":"{}","retry_after_ms":{}}}"#,
                rejection.reason.as_str(),
                rejection.retry_after.as_millis_ceil()
            ),
            Some(rejection.retry_after),
        ),
        CallError::TimedOut { .. } => (
            StatusCode::GATEWAY_TIMEOUT,
            r#"{"error":"timed_out"}"#.to_string(),
            None,
        ),
        CallError::DeadlineExceeded { .. } => (
            StatusCode::GATEWAY_TIMEOUT,
            r#"{"error":"deadline_exceeded"}"#.to_string(),
            None,
        ),
        CallError::Failed(_) => (
            StatusCode::BAD_GATEWAY,
            r#"{"error":"failed"}"#.to_string(),
            None,
        ),
        CallError::Cancelled => (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"error":"cancelled"}"#.to_string(),
            None,
        ),
        // An ending added later: unavailable, without a promise of when.
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"error":"unavailable"}"#.to_string(),
            None,
        ),
    };
    let mut response = http::Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let Some(after) = retry_after {
        headers.insert(http::header::RETRY_AFTER, retry_after_value(after));
    }
    response
}

/// `Retry-After` in whole seconds: rounded up, at least 1, at most an hour.
fn retry_after_value(after: Duration) -> http::HeaderValue {
    let nanos = after.as_nanos();
    let secs = nanos.div_ceil(1_000_000_000).clamp(1, MAX_RETRY_AFTER_SECS);
    http::HeaderValue::from(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_bounded() {
        let secs = |d: Duration| retry_after_value(d).to_str().map(str::to_owned).ok();
        assert_eq!(secs(Duration::ZERO).as_deref(), Some("1"));
        assert_eq!(secs(Duration::from_millis(1_000)).as_deref(), Some("1"));
        assert_eq!(secs(Duration::from_millis(1_001)).as_deref(), Some("2"));
        assert_eq!(secs(Duration::MAX).as_deref(), Some("3600"));
    }

    #[test]
    fn each_kind_of_failure_has_its_status_and_says_nothing_of_the_dependency() {
        let cases: [(CallError<&str>, u16, &str); 4] = [
            (CallError::TimedOut { last: Some("x") }, 504, "timed_out"),
            (
                CallError::DeadlineExceeded { last: Some("x") },
                504,
                "deadline_exceeded",
            ),
            (CallError::Failed("secret"), 502, "failed"),
            (CallError::Cancelled, 503, "cancelled"),
        ];
        for (error, status, kind) in cases {
            let r = error_response(&error);
            assert_eq!(r.status().as_u16(), status);
            assert_eq!(r.body(), &format!(r#"{{"error":"{kind}"}}"#));
            assert!(!r.body().contains("secret"));
            assert!(r.headers().get("retry-after").is_none());
            assert_eq!(r.headers()["content-type"], "application/json");
        }
    }
}
