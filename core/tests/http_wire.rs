//! Property tests of HTTP's rules in the core: how a status counts (`status_outcome`,
//! `status_outcome_with_retry_after`), and the `Retry-After` header (`parse_retry_after`,
//! `parse_http_date`): whatever bytes a peer sends, nothing panics; a date is read exactly as
//! the `httpdate` crate reads it, in all three forms, and every instant from 1970 to 9999
//! reads back; and the hint a throttle carries is the delay-seconds, or else the date counted
//! from the wall clock.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use std::cell::Cell;
use std::time::UNIX_EPOCH;

use proptest::prelude::*;
use stormguard_core::wire::http::{
    parse_delay_seconds, parse_http_date, parse_retry_after, status_outcome,
    status_outcome_with_retry_after,
};
use stormguard_core::{Duration, Outcome};

/// The last second of 9999, the latest instant an HTTP date names.
const LAST: u64 = 253_402_300_799;

/// What the reference reads from `value`: the seconds since the Unix epoch of the date it
/// names, after trimming the whitespace around it.
fn reference(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let at = httpdate::parse_http_date(text.trim()).ok()?;
    Some(at.duration_since(UNIX_EPOCH).unwrap().as_secs())
}

/// Bytes biased towards what a date parser trips on: the pieces of the three forms (names,
/// separators, digits), and now and then any byte at all.
fn date_bytes() -> impl Strategy<Value = Vec<u8>> {
    const PIECES: &[&[u8]] = &[
        b"Sun",
        b"Sunday",
        b"Mon",
        b"Tue",
        b"Thu",
        b"Feb",
        b"Nov",
        b"Dec",
        b", ",
        b" ",
        b"  ",
        b"-",
        b":",
        b" GMT",
        b"0",
        b"1",
        b"2",
        b"6",
        b"9",
        b"06",
        b"29",
        b"31",
        b"94",
        b"1994",
        b"2000",
        b"08:49:37",
        b"\t",
        b"\xc2\xa0",
    ];
    let piece = prop_oneof![
        6 => prop::sample::select(PIECES).prop_map(<[u8]>::to_vec),
        1 => any::<u8>().prop_map(|b| vec![b]),
    ];
    prop::collection::vec(piece, 0..16).prop_map(|pieces| pieces.concat())
}

/// A date spelled in one of the three forms from fields that may or may not make a date (a
/// day past its month, the wrong weekday, a year out of range, a 24th hour).
fn spelled_date() -> impl Strategy<Value = String> {
    const WEEKDAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let year = prop_oneof![1965..2110u32, 9995..10000u32, 0..10000u32];
    (
        (0..7usize, 0..33u32, 0..12usize, year),
        (0..25u32, 0..61u32, 0..61u32, 0..3u8),
    )
        .prop_map(move |((w, day, m, year), (hour, min, sec, form))| {
            let (weekday, month) = (WEEKDAYS[w], MONTHS[m]);
            let short = &weekday[..3];
            match form {
                0 => format!("{short}, {day:02} {month} {year:04} {hour:02}:{min:02}:{sec:02} GMT"),
                1 => format!(
                    "{weekday}, {day:02}-{month}-{:02} {hour:02}:{min:02}:{sec:02} GMT",
                    year % 100
                ),
                _ => format!("{short} {month} {day:>2} {hour:02}:{min:02}:{sec:02} {year:04}"),
            }
        })
}

/// How DESIGN.md counts an HTTP status, given its readable `Retry-After` hint: 429, and 503
/// with a readable hint, are throttled (with it); 408 and the other 5xx are transient; anything
/// else is a success.
fn documented(status: u16, hint: Option<Duration>) -> Outcome {
    match status {
        429 => Outcome::Throttled { retry_after: hint },
        503 if hint.is_some() => Outcome::Throttled { retry_after: hint },
        408 | 500..=599 => Outcome::Transient,
        _ => Outcome::Success,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 16 } else { 20_000 }))]

    #[test]
    fn any_bytes_read_as_a_date_exactly_as_the_reference_reads_them(value in date_bytes()) {
        prop_assert_eq!(parse_http_date(&value), reference(&value), "{:?}", value);
    }

    #[test]
    fn a_date_spelled_from_any_fields_is_read_as_the_reference_reads_it(text in spelled_date()) {
        let read = parse_http_date(text.as_bytes());
        prop_assert_eq!(read, reference(text.as_bytes()), "{:?}", text);
        prop_assert!(read.is_none_or(|at| at <= LAST));
    }

    #[test]
    fn every_instant_reads_back_from_each_form(at in 0..=LAST) {
        // `Sun, 06 Nov 1994 08:49:37 GMT`, cut into its parts to spell the other two forms.
        let imf = httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(at));
        prop_assert_eq!(parse_http_date(imf.as_bytes()), Some(at), "{}", imf);
        let (short, day, month, year, time) =
            (&imf[..3], &imf[5..7], &imf[8..11], &imf[12..16], &imf[17..25]);
        let asctime = format!("{short} {month} {:>2} {time} {year}", day.trim_start_matches('0'));
        prop_assert_eq!(parse_http_date(asctime.as_bytes()), Some(at), "{}", asctime);
        let whole = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
            .into_iter()
            .find(|w| w.starts_with(short))
            .unwrap();
        let rfc850 = format!("{whole}, {day}-{month}-{} {time} GMT", &year[2..]);
        // Two digits name a year from 1970 to 2069: any other year reads as another date, or
        // as none (its weekday wrong), exactly as the reference reads it.
        let read = parse_http_date(rfc850.as_bytes());
        if (1970..2070).contains(&year.parse::<u32>().unwrap()) {
            prop_assert_eq!(read, Some(at), "{}", rfc850);
        } else {
            prop_assert!(read != Some(at), "{}", rfc850);
            prop_assert_eq!(read, reference(rfc850.as_bytes()), "{}", rfc850);
        }
    }

    #[test]
    fn a_hint_is_the_delay_seconds_or_else_the_date_counted_from_the_clock(
        value in prop_oneof![date_bytes(), spelled_date().prop_map(String::into_bytes)],
        // Nanoseconds since the epoch: mostly 1992 to 2033, where the spelled dates fall.
        clock in prop::option::of(prop_oneof![7e17 as u64..2e18 as u64, any::<u64>()]),
    ) {
        let reads = Cell::new(0);
        let wall_clock = || {
            reads.set(reads.get() + 1);
            clock.map(Duration::from_nanos)
        };
        let hint = parse_retry_after(&value, wall_clock);
        let expected = match (parse_delay_seconds(&value), parse_http_date(&value), clock) {
            (Some(delay), _, _) => Some(delay),
            (None, Some(at), Some(now)) => {
                let left = u128::from(at) * 1_000_000_000 - u128::from(now).min(u128::from(at) * 1_000_000_000);
                Some(Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX)))
            }
            (None, _, _) => None,
        };
        prop_assert_eq!(hint, expected, "{:?} at {:?}", value, clock);
        // The clock is read for a date alone, once.
        let date = parse_delay_seconds(&value).is_none() && parse_http_date(&value).is_some();
        prop_assert_eq!(reads.get(), u32::from(date));
    }

    #[test]
    fn every_status_counts_as_documented_and_only_a_throttle_reads_its_hint(
        status in prop_oneof![100..600u16, any::<u16>()],
        hint in prop::option::of(any::<u64>().prop_map(Duration::from_nanos)),
    ) {
        let reads = Cell::new(0);
        let outcome = status_outcome_with_retry_after(status, || {
            reads.set(reads.get() + 1);
            hint
        });
        prop_assert_eq!(outcome, documented(status, hint), "{} with {:?}", status, hint);
        prop_assert_eq!(reads.get(), u32::from(matches!(status, 429 | 503)));
        prop_assert_eq!(status_outcome(status), documented(status, None), "{}", status);
    }
}
