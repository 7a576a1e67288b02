//! HTTP's rules for a resilient client, sans I/O: how a response's status counts
//! ([`status_outcome`], and [`status_outcome_with_retry_after`] with the server's hint), the
//! `Retry-After` header (delay-seconds, or an HTTP date counted from a wall clock the caller
//! reads: [`parse_retry_after`], [`parse_http_date`]) and a remaining deadline in whole
//! milliseconds (the std adapter's deadline header). The rules need nothing but a status code
//! and header bytes, so they serve an HTTP client on a microcontroller as well as the std
//! adapter's `http::Response` classifier. Like the gRPC parsers in [`grpc`](crate::wire::grpc)
//! and the quota parsers in [`quota`](crate::wire::quota), the parsers take the bytes a peer
//! chose, allocate nothing, never panic, and return `None` for anything they cannot read whole.
//!
//! ```
//! use stormguard_core::wire::http::{parse_delay_seconds, parse_millis, status_outcome};
//! use stormguard_core::{Duration, Outcome};
//!
//! assert_eq!(status_outcome(502), Outcome::Transient);
//! assert_eq!(parse_delay_seconds(b"120"), Some(Duration::from_secs(120)));
//! assert_eq!(parse_millis(b" 250 "), Some(Duration::from_millis(250)));
//! assert_eq!(parse_millis(b"-1"), None);
//! ```

use crate::outcome::Outcome;
use crate::time::Duration;

use super::trim_ows;

/// 408 Request Timeout: the request timed out at the server.
const REQUEST_TIMEOUT: u16 = 408;
/// 429 Too Many Requests: the server throttling its callers.
const TOO_MANY_REQUESTS: u16 = 429;
/// 503 Service Unavailable: down, or defending itself when it says for how long.
const SERVICE_UNAVAILABLE: u16 = 503;

/// How an HTTP response's status counts, without its `Retry-After`: 429 is the server
/// throttling its callers; 408 (the request timed out at the server: nothing was wrong with it)
/// and every 5xx are transient; any other status is a success: 1xx to 3xx, and the other 4xx,
/// which are the dependency answering (the request is wrong, not the dependency): they go back
/// to the caller as they are, are never retried, and count as successes for the dependency's
/// health. A 503 counts as throttled only with a readable `Retry-After`, which
/// [`status_outcome_with_retry_after`] reads.
///
/// ```
/// use stormguard_core::wire::http::status_outcome;
/// use stormguard_core::Outcome;
///
/// assert_eq!(status_outcome(204), Outcome::Success);
/// assert_eq!(status_outcome(404), Outcome::Success); // an answer: the dependency is fine
/// assert_eq!(status_outcome(408), Outcome::Transient);
/// assert_eq!(status_outcome(503), Outcome::Transient); // down: it did not say for how long
/// assert_eq!(status_outcome(429), Outcome::Throttled { retry_after: None });
/// ```
#[must_use]
pub const fn status_outcome(status: u16) -> Outcome {
    match status {
        TOO_MANY_REQUESTS => Outcome::Throttled { retry_after: None },
        REQUEST_TIMEOUT | 500..=599 => Outcome::Transient,
        _ => Outcome::Success,
    }
}

/// [`status_outcome`], with the wait the server asked for (`Retry-After`, as
/// [`parse_retry_after`] reads it) as the throttle's hint: a 429 carries it when it can be read,
/// and a 503 with a readable one is the server defending itself, throttled rather than down.
/// `retry_after` is called for those two statuses only, at most once, so a caller reads the
/// header (and, for a date, its wall clock) only when it counts.
///
/// A throttle that asks for no wait (`Retry-After: 0`, or a date already past) is throttled
/// here, and the call driver then counts it as a transient failure
/// ([`Outcome::effective`](crate::Outcome::effective)): a dependency that keeps answering
/// `503, Retry-After: 0` is down, and trips the breaker like any other 5xx.
///
/// ```
/// use stormguard_core::wire::http::{parse_retry_after, status_outcome_with_retry_after};
/// use stormguard_core::{Duration, Outcome};
///
/// let hint = |value: &'static [u8]| move || parse_retry_after(value, || None);
/// assert_eq!(
///     status_outcome_with_retry_after(503, hint(b"30")),
///     Outcome::Throttled { retry_after: Some(Duration::from_secs(30)) }
/// );
/// assert_eq!(status_outcome_with_retry_after(503, hint(b"soon")), Outcome::Transient);
/// assert_eq!(
///     status_outcome_with_retry_after(429, hint(b"soon")),
///     Outcome::Throttled { retry_after: None }
/// );
/// assert_eq!(status_outcome_with_retry_after(200, || unreachable!()), Outcome::Success);
/// ```
#[must_use]
pub fn status_outcome_with_retry_after(
    status: u16,
    retry_after: impl FnOnce() -> Option<Duration>,
) -> Outcome {
    match status {
        TOO_MANY_REQUESTS => Outcome::Throttled {
            retry_after: retry_after(),
        },
        // A 503 is the dependency defending itself only when it says for how long; without a
        // hint that can be read, it is down like any other 5xx.
        SERVICE_UNAVAILABLE => match retry_after() {
            Some(d) => Outcome::Throttled {
                retry_after: Some(d),
            },
            None => Outcome::Transient,
        },
        _ => status_outcome(status),
    }
}

/// The wait a `Retry-After` value asks for (RFC 9110, 10.2.3): its delay-seconds as
/// [`parse_delay_seconds`] reads them, or else an HTTP date ([`parse_http_date`]) counted from
/// the wall clock: `wall_clock` returns the time since the Unix epoch, and is called only for
/// a date, at most once (without a clock, `None`, a date is unreadable). A date already past
/// is zero. `None` for anything unreadable. Like every hint, the call driver caps it at the
/// backoff's maximum.
///
/// ```
/// use stormguard_core::wire::http::parse_retry_after;
/// use stormguard_core::Duration;
///
/// // 1994-11-06 08:49:37 UTC is 784 111 777 s after the epoch.
/// let clock = || Some(Duration::from_secs(784_111_700));
/// let date = b"Sun, 06 Nov 1994 08:49:37 GMT";
/// assert_eq!(parse_retry_after(b"120", clock), Some(Duration::from_secs(120)));
/// assert_eq!(parse_retry_after(date, clock), Some(Duration::from_secs(77)));
/// assert_eq!(parse_retry_after(date, || Some(Duration::from_secs(800_000_000))), Some(Duration::ZERO));
/// assert_eq!(parse_retry_after(date, || None), None);
/// assert_eq!(parse_retry_after(b"soon", clock), None);
/// ```
#[must_use]
pub fn parse_retry_after(
    value: &[u8],
    wall_clock: impl FnOnce() -> Option<Duration>,
) -> Option<Duration> {
    if let Some(delay) = parse_delay_seconds(value) {
        return Some(delay);
    }
    // The date first: the clock is read only for a value that names one.
    let at = core::time::Duration::from_secs(parse_http_date(value)?);
    let now = core::time::Duration::from(wall_clock()?);
    Some(Duration::from(at.saturating_sub(now)))
}

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
/// minus sign, a fraction, anything else (an HTTP date is the other form, which
/// [`parse_retry_after`] reads), or a number past `u64::MAX`. The duration saturates at
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

/// The days of each month of a common year, January first.
const DAYS_IN_MONTH: [u64; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// The days of a common year before each month, January first.
const DAYS_BEFORE_MONTH: [u64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];

/// The months as HTTP dates spell them, January first.
const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// The weekdays' names, Monday first; HTTP dates spell them whole or by their first three
/// letters.
const WEEKDAYS: [&[u8]; 7] = [
    b"Monday",
    b"Tuesday",
    b"Wednesday",
    b"Thursday",
    b"Friday",
    b"Saturday",
    b"Sunday",
];

/// A date and time as an HTTP date spells it, not yet checked against the calendar.
struct Spelled {
    year: u64,
    /// 1 to 12, as spelled.
    month: u64,
    day: u64,
    hour: u64,
    minute: u64,
    second: u64,
    /// Monday is 0.
    weekday: u64,
}

/// The decimal number `digits` spell, every byte a digit (none at all reads as zero).
fn number(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, &b| {
        let d = b
            .is_ascii_digit()
            .then(|| u64::from(b.wrapping_sub(b'0')))?;
        Some(n.saturating_mul(10).saturating_add(d))
    })
}

/// Where in `names` the one `abbr` begins is: a month from 1, a weekday from 0 (`first`).
fn position(names: &[&[u8]], abbr: [u8; 3], first: u64) -> Option<u64> {
    let i = names.iter().position(|name| name.starts_with(&abbr))?;
    u64::try_from(i).ok()?.checked_add(first)
}

/// IMF-fixdate, the form senders use: `Sun, 06 Nov 1994 08:49:37 GMT`.
fn imf_fixdate(text: &[u8]) -> Option<Spelled> {
    let &[w0, w1, w2, b',', b' ', d0, d1, b' ', m0, m1, m2, b' ', y0, y1, y2, y3, b' ', h0, h1, b':', n0, n1, b':', s0, s1, b' ', b'G', b'M', b'T'] =
        text
    else {
        return None;
    };
    Some(Spelled {
        year: number(&[y0, y1, y2, y3])?,
        month: position(&MONTHS, [m0, m1, m2], 1)?,
        day: number(&[d0, d1])?,
        hour: number(&[h0, h1])?,
        minute: number(&[n0, n1])?,
        second: number(&[s0, s1])?,
        weekday: position(&WEEKDAYS, [w0, w1, w2], 0)?,
    })
}

/// RFC 850's obsolete form: `Sunday, 06-Nov-94 08:49:37 GMT`, the year's two digits read as
/// 1970 to 2069.
fn rfc850_date(text: &[u8]) -> Option<Spelled> {
    let (weekday, rest) = WEEKDAYS
        .iter()
        .zip(0..)
        .find_map(|(name, i)| Some((i, text.strip_prefix(*name)?.strip_prefix(b", ")?)))?;
    // The byte between the year and the hour (a space) is not checked: an obsolete form, read
    // leniently.
    let &[d0, d1, b'-', m0, m1, m2, b'-', y0, y1, _, h0, h1, b':', n0, n1, b':', s0, s1, b' ', b'G', b'M', b'T'] =
        rest
    else {
        return None;
    };
    let yy = number(&[y0, y1])?;
    let century = if yy < 70 { 2000 } else { 1900 };
    Some(Spelled {
        year: yy.saturating_add(century),
        month: position(&MONTHS, [m0, m1, m2], 1)?,
        day: number(&[d0, d1])?,
        hour: number(&[h0, h1])?,
        minute: number(&[n0, n1])?,
        second: number(&[s0, s1])?,
        weekday,
    })
}

/// C's asctime form: `Sun Nov  6 08:49:37 1994`, the day padded with a space or a zero.
fn asctime_date(text: &[u8]) -> Option<Spelled> {
    let &[w0, w1, w2, b' ', m0, m1, m2, b' ', d0, d1, b' ', h0, h1, b':', n0, n1, b':', s0, s1, b' ', y0, y1, y2, y3] =
        text
    else {
        return None;
    };
    let day = if d0 == b' ' {
        number(&[d1])?
    } else {
        number(&[d0, d1])?
    };
    Some(Spelled {
        year: number(&[y0, y1, y2, y3])?,
        month: position(&MONTHS, [m0, m1, m2], 1)?,
        day,
        hour: number(&[h0, h1])?,
        minute: number(&[n0, n1])?,
        second: number(&[s0, s1])?,
        weekday: position(&WEEKDAYS, [w0, w1, w2], 0)?,
    })
}

/// The leap years from year 1 to `year`, both counted.
const fn leap_years_through(year: u64) -> u64 {
    (year / 4)
        .saturating_sub(year / 100)
        .saturating_add(year / 400)
}

impl Spelled {
    /// The seconds since the Unix epoch, if the date is one: a day within its month (29
    /// February in a leap year only), a year from 1970 to 9999, a time of day up to 23:59:59,
    /// and the weekday the date falls on.
    fn unix_seconds(&self) -> Option<u64> {
        let year = self.year;
        let leap =
            year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
        let month = usize::try_from(self.month.checked_sub(1)?).ok()?;
        let after_february = leap && month >= 2;
        let month_len = DAYS_IN_MONTH
            .get(month)?
            .saturating_add(u64::from(leap && month == 1));
        let before = DAYS_BEFORE_MONTH
            .get(month)?
            .saturating_add(u64::from(after_february));
        let real = (1970..=9999).contains(&year)
            && (1..=month_len).contains(&self.day)
            && self.hour < 24
            && self.minute < 60
            && self.second < 60;
        if !real {
            return None;
        }
        let leap_days =
            leap_years_through(year.saturating_sub(1)).saturating_sub(leap_years_through(1969));
        let days = year
            .saturating_sub(1970)
            .saturating_mul(365)
            .saturating_add(leap_days)
            .saturating_add(before)
            .saturating_add(self.day.saturating_sub(1));
        // 1 January 1970 was a Thursday (3, counting from Monday).
        if days.saturating_add(3) % 7 != self.weekday {
            return None;
        }
        Some(
            days.saturating_mul(86_400)
                .saturating_add(self.hour.saturating_mul(3_600))
                .saturating_add(self.minute.saturating_mul(60))
                .saturating_add(self.second),
        )
    }
}

/// The instant an HTTP date names, in whole seconds since the Unix epoch (RFC 9110, 5.6.7): the
/// IMF-fixdate senders use (`Sun, 06 Nov 1994 08:49:37 GMT`), or either obsolete form a
/// recipient still reads, RFC 850's (`Sunday, 06-Nov-94 08:49:37 GMT`, the two-digit year read
/// as 1970 to 2069) and C's asctime (`Sun Nov  6 08:49:37 1994`), with whitespace around it. The
/// names are case-sensitive, as the grammar spells them. `None` for anything else, and for a
/// date that is not one: a day past its month's end (29 February outside a leap year), a year
/// before 1970 or past 9999, a time past 23:59:59 (no leap second), or the wrong weekday.
///
/// ```
/// use stormguard_core::wire::http::parse_http_date;
///
/// assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
/// assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777));
/// assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), Some(784_111_777));
/// assert_eq!(parse_http_date(b"Mon, 06 Nov 1994 08:49:37 GMT"), None); // a Sunday
/// assert_eq!(parse_http_date(b"Thu, 29 Feb 2001 00:00:00 GMT"), None); // not a leap year
/// assert_eq!(parse_http_date(b"sun, 06 nov 1994 08:49:37 gmt"), None);
/// ```
#[must_use]
pub fn parse_http_date(value: &[u8]) -> Option<u64> {
    let text = core::str::from_utf8(value).ok()?.trim().as_bytes();
    if !text.is_ascii() {
        return None;
    }
    // The three forms differ in length (29 bytes, 30 to 33, 24): at most one can match.
    imf_fixdate(text)
        .or_else(|| rfc850_date(text))
        .or_else(|| asctime_date(text))?
        .unix_seconds()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The throttle a 429 or a 503 with a hint is.
    fn throttled(secs: u64) -> Outcome {
        Outcome::Throttled {
            retry_after: Some(Duration::from_secs(secs)),
        }
    }

    #[test]
    fn only_429_and_503_read_the_retry_after_hint() {
        for status in [
            0, 100, 200, 204, 304, 400, 404, 408, 500, 502, 504, 599, 600, 999,
        ] {
            let outcome = status_outcome_with_retry_after(status, || panic!("{status} read it"));
            assert_eq!(outcome, status_outcome(status), "{status}");
        }
        assert_eq!(
            status_outcome_with_retry_after(429, || None),
            status_outcome(429)
        );
        assert_eq!(
            status_outcome_with_retry_after(429, || Some(Duration::from_secs(3))),
            throttled(3)
        );
        assert_eq!(
            status_outcome_with_retry_after(503, || Some(Duration::ZERO)),
            throttled(0)
        );
    }

    #[test]
    fn a_503_without_a_readable_hint_is_down_like_any_5xx() {
        assert_eq!(
            status_outcome_with_retry_after(503, || None),
            Outcome::Transient
        );
        for status in 500..=599 {
            if status != SERVICE_UNAVAILABLE {
                assert_eq!(status_outcome(status), Outcome::Transient, "{status}");
            }
        }
    }

    #[test]
    fn a_408_is_transient_and_other_4xx_are_answers_counted_as_healthy() {
        assert_eq!(status_outcome(408), Outcome::Transient);
        for status in (400..=499).filter(|s| ![408, 429].contains(s)) {
            assert_eq!(status_outcome(status), Outcome::Success, "{status}");
        }
    }

    #[test]
    fn the_three_date_forms_name_the_same_instant() {
        let at = Some(784_111_777);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), at);
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), at);
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), at);
        assert_eq!(parse_http_date(b"Sun Nov 06 08:49:37 1994"), at);
        assert_eq!(parse_http_date(b" \tSun Nov  6 08:49:37 1994\r\n"), at);
    }

    #[test]
    fn the_calendar_ends_are_read_exactly() {
        assert_eq!(parse_http_date(b"Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse_http_date(b"Wed, 31 Dec 1969 23:59:59 GMT"), None);
        assert_eq!(
            parse_http_date(b"Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(253_402_300_799)
        );
        assert_eq!(
            parse_http_date(b"Thu, 29 Feb 2024 12:00:00 GMT"),
            Some(1_709_208_000)
        );
        assert_eq!(
            parse_http_date(b"Tue, 29 Feb 2000 00:00:00 GMT"),
            Some(951_782_400)
        );
        assert_eq!(
            parse_http_date(b"Thursday, 01-Jan-70 00:00:00 GMT"),
            Some(0)
        );
        assert_eq!(
            parse_http_date(b"Tuesday, 31-Dec-69 23:59:59 GMT"),
            Some(3_155_759_999)
        );
    }

    #[test]
    fn a_date_that_is_not_one_is_refused() {
        for bad in [
            &b"Mon, 06 Nov 1994 08:49:37 GMT"[..], // a Sunday
            b"Thu, 29 Feb 2001 00:00:00 GMT",      // not a leap year
            b"Mon, 29 Feb 2100 00:00:00 GMT",      // a century, not a leap year
            b"Fri, 31 Nov 1994 08:49:37 GMT",
            b"Sat, 00 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 24:00:00 GMT",
            b"Sun, 06 Nov 1994 08:60:37 GMT",
            b"Sun, 06 Nov 1994 08:49:60 GMT",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 nov 1994 08:49:37 GMT",
            b"Sun, 6 Nov 1994 08:49:37 GMT",
            b"Sun,  6 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 94 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 GMT ", // the trailing space is trimmed: fine
            b"Sun, 06 Nov 1994 8:49:37 GMT",
            b"Sun, 06 Nov +994 08:49:37 GMT",
            b"Sun, 06-Nov-94 08:49:37 GMT",
            b"Sunday, 06-Nov-1994 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 94",
            b"Sun Nov 6  08:49:37 1994",
            b"Sun Nov  6 08:49:37 1994 GMT",
            b"",
            b"GMT",
        ] {
            let expected = (bad == b"Sun, 06 Nov 1994 08:49:37 GMT ").then_some(784_111_777);
            assert_eq!(parse_http_date(bad), expected, "{bad:?}");
        }
    }

    #[test]
    fn a_date_is_ascii_inside_whatever_whitespace_surrounds_it() {
        // A no-break space around the date is whitespace; inside it, no byte may be non-ASCII.
        let around = "\u{a0}Sun, 06 Nov 1994 08:49:37 GMT\u{3000}";
        assert_eq!(parse_http_date(around.as_bytes()), Some(784_111_777));
        assert_eq!(
            parse_http_date("Sunday, 06-Nov-94\u{a0}08:49:37 GMT".as_bytes()),
            None
        );
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT\xff"), None);
    }

    #[test]
    fn the_obsolete_form_leaves_the_byte_before_the_hour_unchecked() {
        assert_eq!(
            parse_http_date(b"Sunday, 06-Nov-94T08:49:37 GMT"),
            Some(784_111_777)
        );
    }

    #[test]
    fn a_date_counts_from_the_wall_clock_and_a_past_one_is_zero() {
        let date = b"Sun, 06 Nov 1994 08:49:37 GMT";
        let clock = |nanos: u64| move || Some(Duration::from_nanos(nanos));
        assert_eq!(
            parse_retry_after(date, clock(784_111_776_250_000_000)),
            Some(Duration::from_millis(750))
        );
        assert_eq!(
            parse_retry_after(date, clock(784_111_777_000_000_000)),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after(date, clock(u64::MAX)),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after(b"Fri, 31 Dec 9999 23:59:59 GMT", clock(0)),
            Some(Duration::MAX)
        );
    }

    #[test]
    fn the_wall_clock_is_read_only_for_a_date() {
        let no_clock = || -> Option<Duration> { panic!("the clock was read") };
        assert_eq!(
            parse_retry_after(b" 7 ", no_clock),
            Some(Duration::from_secs(7))
        );
        assert_eq!(parse_retry_after(b"soon", no_clock), None);
        assert_eq!(parse_retry_after(b"-1", no_clock), None);
        assert_eq!(
            parse_retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT", || None),
            None
        );
    }
}
