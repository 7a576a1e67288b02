//! Every header value the tower layer reads from the network, as the bytes a hostile peer
//! chooses: `Retry-After` (delay-seconds, or an HTTP date counted from the wall clock), the
//! published quota (`RateLimit` with `RateLimit-Policy`, the counts and resets of `RateLimit-*`
//! and `X-RateLimit-*`), `grpc-timeout`, `grpc-status`, `grpc-retry-pushback-ms`, the deadline
//! header (`x-stormguard-deadline-ms`) and the criticality header; and the HTTP status rule fed
//! each line's hint. The input is split into lines; every parser reads every line (and each line
//! with the next as its `RateLimit-Policy`), what the quota parsers read drives a published
//! quota, and the lines together are one response's quota fields (each line's first byte names
//! its field), which read the same in any order and any case.
//!
//! After every line: nothing panicked; what a parser read is bounded by what its grammar
//! allows (digits counted, units known, lengths capped); the delay-seconds and deadline parsers
//! agree with Rust's own `u64` parser and the HTTP-date parser with the `httpdate` crate; a
//! `Retry-After` hint is the delay-seconds or else the date counted from the clock; a status
//! (the line's first two bytes) counts as DESIGN.md says, reading its hint only for 429 and
//! 503; and the quota, whatever it was fed, never refuses for longer than its longest wait,
//! never for a reason but its own, and never loosens while it holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stormguard_core::call::Criticality;
use stormguard_core::limits::{Quota, QuotaSettings};
use stormguard_core::part::Limit;
use stormguard_core::wire::grpc::{parse_pushback, parse_status, parse_timeout, TIMEOUT_DIGITS};
use stormguard_core::wire::http::{
    parse_delay_seconds, parse_http_date, parse_millis, parse_retry_after, status_outcome,
    status_outcome_with_retry_after,
};
use stormguard_core::wire::quota::{
    parse_count, parse_fields, parse_ratelimit, parse_reset, Published, MAX_VALUE,
};
use stormguard_core::{Duration, Instant, Outcome, RefusalReason};

/// The largest integer of 15 digits: the quota parsers read no more.
const MAX_15: u64 = 999_999_999_999_999;

/// The fields a quota is published in, and one that is not: a line's first byte picks its name.
const NAMES: [&str; 9] = [
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "retry-after",
];

/// What Rust's `u64` parser reads from `value` after trimming spaces and tabs.
fn std_u64(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    text.trim_matches([' ', '\t']).parse().ok()
}

fn check_line(line: &[u8], next: Option<&[u8]>, unix: Option<u64>) -> Published {
    // Retry-After and the deadline header: whole numbers exactly as `u64::from_str` reads them.
    let seconds = parse_delay_seconds(line);
    assert_eq!(seconds, std_u64(line).map(Duration::from_secs));
    assert_eq!(parse_millis(line), std_u64(line).map(Duration::from_millis));
    // An HTTP date: exactly what `httpdate` reads, in whole seconds since the epoch.
    let date = parse_http_date(line);
    let reference = std::str::from_utf8(line).ok().and_then(|text| {
        let at = httpdate::parse_http_date(text.trim()).ok()?;
        Some(at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs())
    });
    assert_eq!(date, reference);
    // Retry-After: the delay-seconds, or else the date counted from the clock (`unix`).
    let clock = unix.map(Duration::from_secs);
    let hint = parse_retry_after(line, || clock);
    let from_clock = date.zip(clock).map(|(at, now)| {
        // In nanoseconds, as far as the clock reaches (it saturates 584 years on): a date
        // past it leaves a wait that saturates too.
        let at = u128::from(at) * 1_000_000_000;
        let left = at - at.min(u128::from(now.as_nanos()));
        Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX))
    });
    assert_eq!(hint, seconds.or(from_clock));
    // The status rule, on a status taken from the line's first two bytes.
    if let [a, b, ..] = *line {
        let status = u16::from_be_bytes([a, b]);
        let mut reads = 0;
        let outcome = status_outcome_with_retry_after(status, || {
            reads += 1;
            hint
        });
        let expected = match status {
            429 => Outcome::Throttled { retry_after: hint },
            503 if hint.is_some() => Outcome::Throttled { retry_after: hint },
            408 | 500..=599 => Outcome::Transient,
            _ => Outcome::Success,
        };
        assert_eq!(outcome, expected);
        assert_eq!(reads, u32::from(matches!(status, 429 | 503)));
        assert_eq!(
            status_outcome(status),
            status_outcome_with_retry_after(status, || None)
        );
    }

    // gRPC: at most 8 digits and a known unit; at most 10 digits of status or pushback.
    if parse_timeout(line).is_some() {
        assert!(line.len() <= TIMEOUT_DIGITS + 1);
        assert!(b"HMSmun".contains(line.last().unwrap()));
    }
    if parse_status(line).is_some() {
        assert!(line.len() <= 10 && line.iter().all(u8::is_ascii_digit));
    }
    if let Some(d) = parse_pushback(line) {
        assert!(d <= Duration::from_millis(9_999_999_999));
    }

    // The criticality label: never read past 32 bytes.
    if Criticality::parse(line).is_some() {
        assert!(line.len() <= 32);
    }

    // The quota's parsers: bounded numbers, nothing read from an over-long value.
    let count = parse_count(line);
    if let Some(n) = count {
        assert!(n <= MAX_15 && line.len() <= MAX_VALUE);
    }
    let reset = parse_reset(line, unix);
    if let Some(d) = reset {
        assert!(d <= Duration::from_secs(MAX_15 + 1) && line.len() <= MAX_VALUE);
    }
    let structured = parse_ratelimit(line, next);
    if let Some(p) = structured {
        assert!(line.len() <= MAX_VALUE);
        assert!(p.remaining.is_some_and(|r| r <= MAX_15));
        assert!(p.limit.is_none_or(|l| l <= MAX_15));
        assert!(p.reset.is_none_or(|r| r <= Duration::from_secs(MAX_15)));
    }
    structured.unwrap_or(Published::NONE).tighter(Published {
        limit: None,
        remaining: count,
        reset,
    })
}

fuzz_target!(|data: &[u8]| {
    // The first line, if it is a number, is the wall clock's Unix time.
    let unix = data.split(|&b| b == b'\n').next().and_then(std_u64);
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    // The lines as one response's fields (the first byte the name, the rest the value): they
    // read the same in any order and whatever the case of their names.
    let fields: Vec<(String, &[u8])> = lines
        .iter()
        .filter_map(|line| {
            let (first, value) = line.split_first()?;
            Some((NAMES[usize::from(*first) % NAMES.len()].to_string(), value))
        })
        .collect();
    let read = parse_fields(fields.iter().map(|(n, v)| (n.as_bytes(), *v)), || unix);
    let upper: Vec<(String, &[u8])> = fields
        .iter()
        .rev()
        .map(|(n, v)| (n.to_ascii_uppercase(), *v))
        .collect();
    assert_eq!(
        read,
        parse_fields(upper.iter().map(|(n, v)| (n.as_bytes(), *v)), || unix)
    );
    let settings = QuotaSettings::DEFAULT;
    let quota = Quota::new(settings);
    let mut now = Instant::from_secs(1);
    for (i, line) in lines.iter().enumerate() {
        let published = check_line(line, lines.get(i + 1).copied(), unix);
        // Time moves by the line's first byte, in hundreds of milliseconds.
        now += Duration::from_millis(100 * u64::from(line.first().copied().unwrap_or(0)));
        let before = quota.state();
        quota.on_published(now, published);
        let after = quota.state();
        if before.holds_at(now) {
            assert!(after.remaining <= before.remaining && after.floor >= before.floor);
            assert!(after.until >= before.until);
        }
        assert!(after.until.is_none_or(|u| u <= now + settings.max_wait()));
        match quota.take(now) {
            Ok(()) => {}
            Err(refused) => {
                assert_eq!(refused.reason, RefusalReason::QuotaReserve);
                assert!(refused.retry_after <= settings.max_wait());
                assert!(after.remaining <= after.floor);
            }
        }
    }
});
