//! HTTP header values a resilient client reads, sans I/O: `Retry-After`'s delay in seconds and
//! a remaining deadline in whole milliseconds (the std adapter's deadline header). Like the
//! gRPC parsers in [`grpc`](crate::wire::grpc) and the quota parsers in
//! [`quota`](crate::wire::quota), they take the bytes a peer chose, allocate nothing,
//! never panic, and return `None` for anything they cannot read whole.
//!
//! ```
//! use stormguard_core::wire::http::{parse_delay_seconds, parse_millis};
//! use stormguard_core::Duration;
//!
//! assert_eq!(parse_delay_seconds(b"120"), Some(Duration::from_secs(120)));
//! assert_eq!(parse_millis(b" 250 "), Some(Duration::from_millis(250)));
//! assert_eq!(parse_millis(b"-1"), None);
//! ```

use crate::time::Duration;

use super::trim_ows;

/// A whole number as Rust's `u64` parser reads it (ASCII digits, leading zeros included, one
/// optional leading `+`) after trimming OWS; `None` for anything else, or a number past
/// `u64::MAX`. One pass over the value, stopping at the first byte that is not a digit or
/// that overflows.
fn whole_number(value: &[u8]) -> Option<u64> {
    let text = trim_ows(value);
    let digits = text.strip_prefix(b"+").unwrap_or(text);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let d = b
            .is_ascii_digit()
            .then(|| u64::from(b.wrapping_sub(b'0')))?;
        n.checked_mul(10)?.checked_add(d)
    })
}

/// `Retry-After`'s delay-seconds form (RFC 9110, 10.2.3): a non-negative whole number of
/// seconds, with optional whitespace around it (and, leniently, a leading `+`). `None` for a
/// minus sign, a fraction, anything else (an HTTP date is the other form; the std adapter
/// reads it with the system clock), or a number past `u64::MAX`. The duration saturates at
/// [`Duration::MAX`]; the call driver caps any hint at the backoff's maximum.
///
/// ```
/// use stormguard_core::wire::http::parse_delay_seconds;
/// use stormguard_core::Duration;
/// assert_eq!(parse_delay_seconds(b"0"), Some(Duration::ZERO));
/// assert_eq!(parse_delay_seconds(b"1.5"), None);
/// assert_eq!(parse_delay_seconds(b"Wed, 21 Oct 2015 07:28:00 GMT"), None);
/// ```
#[must_use]
pub fn parse_delay_seconds(value: &[u8]) -> Option<Duration> {
    whole_number(value).map(Duration::from_secs)
}

/// A remaining deadline in whole milliseconds (the std adapter's `x-stormguard-deadline-ms`):
/// a non-negative whole number as for [`parse_delay_seconds`]. The duration saturates at
/// [`Duration::MAX`]: an adopted deadline only ever tightens a call.
///
/// ```
/// use stormguard_core::wire::http::parse_millis;
/// use stormguard_core::Duration;
/// assert_eq!(parse_millis(b"1500"), Some(Duration::from_millis(1_500)));
/// assert_eq!(parse_millis(b"-1500"), None);
/// assert_eq!(parse_millis(b"18446744073709551616"), None); // past u64::MAX
/// assert_eq!(parse_millis(b""), None);
/// ```
#[must_use]
pub fn parse_millis(value: &[u8]) -> Option<Duration> {
    whole_number(value).map(Duration::from_millis)
}
