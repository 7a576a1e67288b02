//! Property tests of the gRPC wire parsers (`grpc-timeout`, `grpc-status`,
//! `grpc-retry-pushback-ms`, the service of a call's path): whatever bytes a peer sends, they never panic and what they yield
//! is bounded; what the formatter writes reads back as at least the time written, and within one
//! unit of it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::wire::grpc::{
    format_timeout, parse_pushback, parse_status, parse_timeout, service_of, status_outcome, Code,
    TIMEOUT_DIGITS,
};
use stormguard_core::{Duration, Outcome};

/// Bytes biased towards what the parsers trip on: digits, the unit letters, signs and spaces,
/// and now and then any byte at all.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => b'0'..=b'9',
        2 => prop::sample::select(&b"HMSmunhs+- .\t"[..]),
        1 => any::<u8>(),
    ];
    prop::collection::vec(byte, 0..14)
}

/// The length of a `grpc-timeout` unit in nanoseconds.
fn unit_nanos(unit: u8) -> u64 {
    match unit {
        b'n' => 1,
        b'u' => 1_000,
        b'm' => 1_000_000,
        b'S' => 1_000_000_000,
        b'M' => 60_000_000_000,
        b'H' => 3_600_000_000_000,
        other => panic!("not a unit: {other}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 16 } else { 20_000 }))]

    #[test]
    fn a_timeout_is_read_only_from_digits_and_a_unit_and_exactly(value in header_bytes()) {
        let read = parse_timeout(&value);
        let well_formed = (2..=TIMEOUT_DIGITS + 1).contains(&value.len())
            && value[..value.len() - 1].iter().all(u8::is_ascii_digit)
            && b"HMSmun".contains(value.last().unwrap());
        prop_assert_eq!(read.is_some(), well_formed, "{:?}", value);
        if let Some(d) = read {
            let digits: u64 = std::str::from_utf8(&value[..value.len() - 1]).unwrap().parse().unwrap();
            let unit = unit_nanos(*value.last().unwrap());
            let exact = u128::from(digits) * u128::from(unit);
            prop_assert_eq!(u128::from(d.as_nanos()), exact.min(u128::from(u64::MAX)));
        }
    }

    #[test]
    fn a_formatted_timeout_reads_back_as_at_least_its_time_within_one_unit(nanos in any::<u64>()) {
        let d = Duration::from_nanos(nanos);
        let written = format_timeout(d);
        let bytes = written.as_bytes();
        prop_assert!((2..=TIMEOUT_DIGITS + 1).contains(&bytes.len()), "{:?}", written);
        let read = parse_timeout(bytes).unwrap();
        prop_assert!(read >= d, "{:?} -> {:?}", d, written);
        let unit = unit_nanos(*bytes.last().unwrap());
        prop_assert!(read.as_nanos() - d.as_nanos() < unit.max(2), "{:?} -> {:?}", d, written);
    }

    #[test]
    fn a_timeout_read_from_the_wire_is_written_back_as_the_same_time(value in header_bytes()) {
        if let Some(d) = parse_timeout(&value) {
            // Zero is written as `1n`: the wire format asks for a positive number.
            if d > Duration::ZERO && d < Duration::MAX {
                prop_assert_eq!(parse_timeout(format_timeout(d).as_bytes()), Some(d));
            }
        }
    }

    #[test]
    fn status_and_pushback_are_bounded_and_every_status_counts_somehow(value in header_bytes()) {
        if let Some(code) = parse_status(&value) {
            prop_assert!(value.len() <= 10 && value.iter().all(u8::is_ascii_digit));
            let outcome = status_outcome(code);
            prop_assert_eq!(outcome == Outcome::Success, code == Code::OK);
            prop_assert!(!matches!(outcome, Outcome::Cancelled | Outcome::TimedOut));
        }
        if let Some(wait) = parse_pushback(&value) {
            prop_assert!(wait <= Duration::from_millis(9_999_999_999));
        }
    }

    /// A path from a peer (an inbound call's, on a server) keys a table: the service it
    /// yields is exactly the text between the path's first two slashes, never empty, never
    /// holding a slash.
    #[test]
    fn a_service_is_only_ever_the_whole_first_segment_of_a_two_segment_path(
        path in "(/|[a-zA-Z.]|\\.|%|\\u{0}|\\u{10FFFF}){0,12}"
    ) {
        if let Some(service) = service_of(&path) {
            prop_assert!(!service.is_empty() && !service.contains('/'));
            let method = path.strip_prefix('/').and_then(|p| p.strip_prefix(service))
                .and_then(|p| p.strip_prefix('/'));
            prop_assert!(method.is_some_and(|m| !m.is_empty() && !m.contains('/')), "{:?}", path);
        } else {
            let parts: Vec<&str> = path.split('/').collect();
            let well_formed = parts.len() == 3 && parts[0].is_empty()
                && !parts[1].is_empty() && !parts[2].is_empty();
            prop_assert!(!well_formed, "{:?}", path);
        }
    }
}

#[test]
fn the_transient_and_throttled_codes_are_exactly_the_three_named() {
    for n in 0..=20 {
        let code = Code(n);
        let expected = match code {
            Code::OK => Outcome::Success,
            Code::UNAVAILABLE | Code::DEADLINE_EXCEEDED => Outcome::Transient,
            Code::RESOURCE_EXHAUSTED => Outcome::Throttled { retry_after: None },
            _ => Outcome::Permanent,
        };
        assert_eq!(status_outcome(code), expected, "{n}");
    }
    assert_eq!(parse_status(b"99999999999"), None);
    assert_eq!(parse_status(b"4294967296"), Some(Code(u32::MAX)));
}
