//! gRPC's wire rules that a resilient client needs, sans I/O: the `grpc-timeout` header (read
//! and written), the `grpc-status` and `grpc-retry-pushback-ms` values, and how a status code
//! counts ([`status_outcome`]). The std adapter's tower layer reads them from headers and
//! trailers; everything here takes bytes, allocates nothing and never panics, whatever a peer
//! sends.
//!
//! ```
//! use stormguard_core::wire::grpc::{format_timeout, parse_timeout, status_outcome, Code};
//! use stormguard_core::{Duration, Outcome};
//!
//! assert_eq!(parse_timeout(b"250m"), Some(Duration::from_millis(250)));
//! assert_eq!(format_timeout(Duration::from_millis(1_500)).as_str(), "1500000u");
//! assert_eq!(status_outcome(Code::UNAVAILABLE), Outcome::Transient);
//! ```

use crate::outcome::Outcome;
use crate::time::Duration;

/// The most digits a `grpc-timeout` value may have (the gRPC wire format: "TimeoutValue, a
/// positive integer as ASCII string of at most 8 digits").
pub const TIMEOUT_DIGITS: usize = 8;

/// The largest number a `grpc-timeout` value can carry in any unit.
const TIMEOUT_VALUE_MAX: u64 = 99_999_999;

/// The units of a `grpc-timeout` value, finest first, with their length in nanoseconds.
const TIMEOUT_UNITS: [(u8, u64); 6] = [
    (b'n', 1),
    (b'u', 1_000),
    (b'm', 1_000_000),
    (b'S', 1_000_000_000),
    (b'M', 60_000_000_000),
    (b'H', 3_600_000_000_000),
];

/// A gRPC status code, as carried in `grpc-status` (the protocol's 17 codes, and whatever
/// number a peer sends).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Code(pub u32);

impl Code {
    /// Not an error.
    pub const OK: Code = Code(0);
    /// The operation was cancelled (typically by the caller).
    pub const CANCELLED: Code = Code(1);
    /// An unknown error (also what an unreadable `grpc-status` means).
    pub const UNKNOWN: Code = Code(2);
    /// The client sent an invalid argument.
    pub const INVALID_ARGUMENT: Code = Code(3);
    /// The deadline expired before the operation could complete.
    pub const DEADLINE_EXCEEDED: Code = Code(4);
    /// Some requested entity was not found.
    pub const NOT_FOUND: Code = Code(5);
    /// Some resource has been exhausted (a quota, or the server's capacity): the server is
    /// defending itself.
    pub const RESOURCE_EXHAUSTED: Code = Code(8);
    /// Internal error.
    pub const INTERNAL: Code = Code(13);
    /// The service is currently unavailable: most likely a transient condition.
    pub const UNAVAILABLE: Code = Code(14);
}

/// How a gRPC status counts: `OK` is a success; `UNAVAILABLE` and `DEADLINE_EXCEEDED` are
/// transient (the service may be back on the next attempt); `RESOURCE_EXHAUSTED` is the server
/// throttling its callers, waiting `pushback` when it said (`grpc-retry-pushback-ms`, see
/// [`parse_pushback`]); every other code is permanent: the service answered and the request
/// itself is at fault (`INVALID_ARGUMENT`, `NOT_FOUND`, ...) or the failure is not one a retry
/// mends (`INTERNAL`, `UNKNOWN`), so it is never retried and never counted against the service.
///
/// ```
/// use stormguard_core::wire::grpc::{status_outcome, status_outcome_with_pushback, Code};
/// use stormguard_core::{Duration, Outcome};
///
/// assert_eq!(status_outcome(Code::OK), Outcome::Success);
/// assert_eq!(status_outcome(Code::DEADLINE_EXCEEDED), Outcome::Transient);
/// assert_eq!(status_outcome(Code::NOT_FOUND), Outcome::Permanent);
/// assert_eq!(
///     status_outcome_with_pushback(Code::RESOURCE_EXHAUSTED, Some(Duration::from_secs(2))),
///     Outcome::Throttled { retry_after: Some(Duration::from_secs(2)) }
/// );
/// ```
#[must_use]
pub const fn status_outcome(code: Code) -> Outcome {
    status_outcome_with_pushback(code, None)
}

/// [`status_outcome`], with the server's pushback for a `RESOURCE_EXHAUSTED` status.
#[must_use]
pub const fn status_outcome_with_pushback(code: Code, pushback: Option<Duration>) -> Outcome {
    match code {
        Code::OK => Outcome::Success,
        Code::UNAVAILABLE | Code::DEADLINE_EXCEEDED => Outcome::Transient,
        Code::RESOURCE_EXHAUSTED => Outcome::Throttled {
            retry_after: pushback,
        },
        _ => Outcome::Permanent,
    }
}

/// Reads ASCII decimal digits: `None` if `value` is empty, longer than `max_digits`, or holds
/// anything but digits (no sign, no space); saturates at `u64::MAX`.
fn parse_digits(value: &[u8], max_digits: usize) -> Option<u64> {
    if value.is_empty() || value.len() > max_digits {
        return None;
    }
    let mut n: u64 = 0;
    for &b in value {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n
            .saturating_mul(10)
            .saturating_add(u64::from(b.wrapping_sub(b'0')));
    }
    Some(n)
}

/// The status code in a `grpc-status` value (decimal digits, at most 10): `None` when it cannot
/// be read, which a client treats as [`Code::UNKNOWN`].
///
/// ```
/// use stormguard_core::wire::grpc::{parse_status, Code};
/// assert_eq!(parse_status(b"14"), Some(Code::UNAVAILABLE));
/// assert_eq!(parse_status(b"-1"), None);
/// ```
#[must_use]
pub fn parse_status(value: &[u8]) -> Option<Code> {
    let n = parse_digits(value, 10)?;
    Some(Code(u32::try_from(n).unwrap_or(u32::MAX)))
}

/// The wait a server asks for in `grpc-retry-pushback-ms` (whole milliseconds, at most 10
/// digits, so at most about 116 days): `None` when absent from `value`, negative (the server
/// asks not to be retried at all; the call driver's throttle rules then apply without a hint)
/// or unreadable.
///
/// ```
/// use stormguard_core::wire::grpc::parse_pushback;
/// use stormguard_core::Duration;
/// assert_eq!(parse_pushback(b"1500"), Some(Duration::from_millis(1_500)));
/// assert_eq!(parse_pushback(b"-1"), None);
/// ```
#[must_use]
pub fn parse_pushback(value: &[u8]) -> Option<Duration> {
    parse_digits(value, 10).map(Duration::from_millis)
}

/// The time a `grpc-timeout` value allows: 1 to 8 ASCII digits, then the unit (`H` hours, `M`
/// minutes, `S` seconds, `m` milliseconds, `u` microseconds, `n` nanoseconds). `None` for
/// anything else (a sign, a space, a ninth digit, an unknown unit). Saturates at
/// [`Duration::MAX`] (99 999 999 hours do not fit in 584 years): a deadline is only ever used to
/// tighten a call, never to lengthen it.
///
/// ```
/// use stormguard_core::wire::grpc::parse_timeout;
/// use stormguard_core::Duration;
/// assert_eq!(parse_timeout(b"1S"), Some(Duration::from_secs(1)));
/// assert_eq!(parse_timeout(b"100u"), Some(Duration::from_micros(100)));
/// assert_eq!(parse_timeout(b"123456789n"), None); // nine digits
/// assert_eq!(parse_timeout(b"99999999H"), Some(Duration::MAX));
/// ```
#[must_use]
pub fn parse_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    let n = parse_digits(digits, TIMEOUT_DIGITS)?;
    let mut units = TIMEOUT_UNITS.iter();
    let &(_, nanos) = units.find(|&&(u, _)| u == unit)?;
    Some(Duration::from_nanos(n.saturating_mul(nanos)))
}

/// The service a gRPC call's path names (`/package.Service/Method` gives `package.Service`):
/// the scope a client keeps one breaker per. `None` for a path that is not a gRPC call's (no
/// leading `/`, an empty service or method, more segments).
///
/// ```
/// use stormguard_core::wire::grpc::service_of;
/// assert_eq!(service_of("/stock.Inventory/Get"), Some("stock.Inventory"));
/// assert_eq!(service_of("/stock.Inventory/"), None);
/// assert_eq!(service_of("/health"), None);
/// ```
#[must_use]
pub fn service_of(path: &str) -> Option<&str> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    let whole = !service.is_empty() && !method.is_empty() && !method.contains('/');
    whole.then_some(service)
}

/// A `grpc-timeout` value ready to send (see [`format_timeout`]): at most 8 digits and a unit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Timeout {
    bytes: [u8; TIMEOUT_DIGITS + 1],
    len: u8,
}

impl Timeout {
    /// The value's bytes, e.g. `b"250m"`.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// The value as text, e.g. `"250m"`.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and unit letters are ever written.
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

impl core::fmt::Debug for Timeout {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `d` as a `grpc-timeout` value, in the finest unit whose count fits in 8 digits, rounded up
/// (a peer reading it back never gets less time than `d`); at least `1n`, and at most a little
/// over [`Duration::MAX`] (which is 5 124 096 hours).
///
/// ```
/// use stormguard_core::wire::grpc::{format_timeout, parse_timeout};
/// use stormguard_core::Duration;
/// assert_eq!(format_timeout(Duration::from_millis(40)).as_str(), "40000000n");
/// assert_eq!(format_timeout(Duration::from_secs(30)).as_str(), "30000000u");
/// assert_eq!(format_timeout(Duration::from_secs(3_600)).as_str(), "3600000m");
/// assert_eq!(format_timeout(Duration::ZERO).as_str(), "1n");
/// let d = Duration::from_nanos(123_456_789_123);
/// assert!(parse_timeout(format_timeout(d).as_bytes()).unwrap() >= d);
/// ```
#[must_use]
pub fn format_timeout(d: Duration) -> Timeout {
    let nanos = d.as_nanos().max(1);
    let mut value = TIMEOUT_VALUE_MAX;
    let mut unit = b'H';
    for &(u, len) in &TIMEOUT_UNITS {
        let whole = nanos.checked_div(len).unwrap_or(0);
        let part = nanos.checked_rem(len).unwrap_or(0);
        let count = whole.saturating_add(u64::from(part != 0));
        if count <= TIMEOUT_VALUE_MAX {
            value = count;
            unit = u;
            break;
        }
    }
    // Digits last to first, into the end of a buffer as wide as the widest value.
    let mut digits = [0u8; TIMEOUT_DIGITS];
    let mut start = TIMEOUT_DIGITS;
    while let Some(slot) = start.checked_sub(1) {
        start = slot;
        if let Some(d) = digits.get_mut(slot) {
            *d = b'0'.saturating_add(u8::try_from(value % 10).unwrap_or(0));
        }
        value /= 10;
        if value == 0 {
            break;
        }
    }
    let mut out = Timeout {
        bytes: [0; TIMEOUT_DIGITS + 1],
        len: 0,
    };
    for &b in digits.get(start..).unwrap_or(&[]).iter().chain(&[unit]) {
        if let Some(slot) = out.bytes.get_mut(usize::from(out.len)) {
            *slot = b;
            out.len = out.len.saturating_add(1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_is_read_only_from_a_whole_grpc_path() {
        assert_eq!(service_of("/a.B/C"), Some("a.B"));
        for path in ["", "/", "//", "/a.B", "a.B/C", "/a.B/C/D", "//C", "/a.B//"] {
            assert_eq!(service_of(path), None, "{path:?}");
        }
    }

    #[test]
    fn every_unit_reads_back() {
        for (unit, len) in TIMEOUT_UNITS {
            let value = [b'7', unit];
            assert_eq!(
                parse_timeout(&value),
                Some(Duration::from_nanos(7 * len)),
                "{}",
                unit as char
            );
        }
    }

    #[test]
    fn malformed_timeouts_are_refused() {
        for bad in [
            &b""[..],
            b"S",
            b"1",
            b"1s",
            b"1h",
            b" 1S",
            b"1 S",
            b"+1S",
            b"-1S",
            b"1.5S",
            b"123456789S",
            b"1SS",
        ] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formatting_picks_the_finest_unit_that_fits_and_rounds_up() {
        let f = |d: Duration| format_timeout(d);
        assert_eq!(f(Duration::from_nanos(99_999_999)).as_str(), "99999999n");
        assert_eq!(f(Duration::from_nanos(100_000_000)).as_str(), "100000u");
        assert_eq!(f(Duration::from_nanos(100_000_001)).as_str(), "100001u");
        assert_eq!(f(Duration::MAX).as_str(), "5124096H");
    }
}
