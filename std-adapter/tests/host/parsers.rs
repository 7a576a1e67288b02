//! Property tests of every parser of network input in the std adapter: the `Retry-After`
//! header (`retry_after`, read by the HTTP classifier), the incoming deadline header
//! (`HttpRequests::adopt_from`, read by the tower layer) and the attempt number a retry carries
//! (`ATTEMPT_HEADER`, read by `NestedRetryLayer`), and the criticality label a request carries
//! (`CRITICALITY_HEADER`, read and capped by `NestedRetryLayer`). Each is fed seeded random bytes and
//! strings: it never panics, what it yields is bounded, and well-formed input reads back as the
//! value written.
#![cfg(feature = "tower")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_possible_truncation,
    missing_docs
)]

use std::time::{Duration as StdDuration, SystemTime};

use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use stormguard_core::{rng::JitterRng, Backoff, Duration, Outcome};
use stormguard_std::classify::{http_outcome, retry_after};
use stormguard_std::nested::{inbound_criticality, inbound_retry};
use stormguard_std::tower::{
    HttpRequests, NestedRetryLayer, PolicyLayer, Requests, ATTEMPT_HEADER, CRITICALITY_HEADER,
    DEADLINE_HEADER,
};
use stormguard_std::{CallError, Criticality, Policy};
use tower::{Layer, ServiceExt};

use crate::support::Seeded;

/// Cases per property.
const CASES: u32 = 20_000;

/// The shared seeded generator, with the header values parsers are fed: a failure names its
/// case and can be replayed.
struct Gen(Seeded);

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen(Seeded::new(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.next()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    /// Bytes a header value may hold, biased towards the ones parsers trip on: digits, signs,
    /// dots, spaces and tabs, letters of dates, and now and then any byte at all.
    fn value(&mut self) -> Vec<u8> {
        const PIECES: &[&[u8]] = &[
            b"0",
            b"1",
            b"9",
            b"-",
            b"+",
            b".",
            b" ",
            b"\t",
            b",",
            b":",
            b"GMT",
            b"Wed",
            b"Oct",
            b"21",
            b"2015",
            b"07",
            b"99999999999999999999",
            b"18446744073709551615",
            b"e",
        ];
        let len = self.below(12);
        let mut v = Vec::new();
        for _ in 0..len {
            if self.below(4) == 0 {
                v.push(self.next() as u8);
            } else {
                v.extend_from_slice(PIECES[self.below(PIECES.len() as u64) as usize]);
            }
        }
        v
    }

    /// A number of any size, most of them small.
    fn number(&mut self) -> u64 {
        match self.below(4) {
            0 => self.below(100),
            1 => self.below(100_000),
            2 => self.next() >> self.below(64),
            _ => u64::MAX - self.below(3),
        }
    }

    /// Optional whitespace around a value.
    fn pad(&mut self) -> &'static str {
        ["", " ", "\t", "  ", " \t"][self.below(5) as usize]
    }
}

fn with(name: http::HeaderName, value: HeaderValue) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(name, value);
    h
}

/// How DESIGN.md classifies an HTTP answer, given what its `Retry-After` header reads as: 429,
/// and 503 with a readable `Retry-After`, are throttled (with that hint); 408 and every other
/// 5xx are transient; any other answer counts as a success: 2xx, the other 4xx (the dependency
/// answered: the request is wrong, not the dependency), and 1xx and 3xx.
fn documented(status: u16, hint: Option<Duration>) -> Outcome {
    match status {
        429 => Outcome::Throttled { retry_after: hint },
        503 if hint.is_some() => Outcome::Throttled { retry_after: hint },
        408 | 500..=599 => Outcome::Transient,
        _ => Outcome::Success,
    }
}

#[test]
fn http_outcome_classifies_every_status_as_documented() {
    // Every status from 100 to 599, and as many again drawn at random, each with no
    // Retry-After, readable ones (seconds, a date already past) and unreadable ones.
    let past = "Wed, 21 Oct 2015 07:28:00 GMT";
    let hints: [(Option<&str>, Option<Duration>); 7] = [
        (None, None),
        (Some("7"), Some(Duration::from_secs(7))),
        (Some(" 0 "), Some(Duration::ZERO)),
        (Some(past), Some(Duration::ZERO)),
        (Some("soon"), None),
        (Some("-1"), None),
        (Some(""), None),
    ];
    let mut g = Gen::new(6);
    let statuses = (100..=599u16).chain((0..500).map(|_| 100 + g.below(500) as u16));
    let mut seen = std::collections::BTreeSet::new();
    for status in statuses {
        for (value, hint) in hints {
            let headers = value.map_or_else(HeaderMap::new, |v| {
                with(RETRY_AFTER, HeaderValue::from_str(v).unwrap())
            });
            assert_eq!(retry_after(&headers), hint, "{value:?}");
            let outcome = http_outcome(StatusCode::from_u16(status).unwrap(), &headers);
            assert_eq!(
                outcome,
                documented(status, hint),
                "{status} with Retry-After {value:?}"
            );
            seen.insert(format!("{outcome:?}"));
        }
    }
    // Every kind of answer came up: success, transient, and throttled with a hint of 7 s, of
    // zero and with none.
    assert_eq!(seen.len(), 5, "{seen:?}");
}

#[test]
fn retry_after_never_panics_and_a_throttled_wait_stays_under_the_backoff_cap() {
    let mut g = Gen::new(1);
    let cap = Backoff::DEFAULT.cap();
    let mut rng = JitterRng::with_seed(7);
    for case in 0..CASES {
        let bytes = g.value();
        let Ok(value) = HeaderValue::from_bytes(&bytes) else {
            continue;
        };
        let headers = with(RETRY_AFTER, value);
        let before = SystemTime::now();
        let parsed = retry_after(&headers);
        if let Some(d) = parsed {
            // What was read is the delay-seconds the value spells in digits, or else the value
            // is an HTTP date and what was read is at most its distance from now (zero once
            // past).
            let text = std::str::from_utf8(&bytes).unwrap().trim();
            let digits = text.strip_prefix('+').unwrap_or(text);
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                assert_eq!(
                    Some(d),
                    digits.parse().ok().map(Duration::from_secs),
                    "case {case}: {bytes:?}"
                );
            } else {
                let at = httpdate::parse_http_date(text)
                    .unwrap_or_else(|_| panic!("case {case}: {bytes:?} read as {d}"));
                let left = at.duration_since(before).unwrap_or_default();
                assert!(
                    d <= Duration::from(left),
                    "case {case}: {bytes:?} read as {d}"
                );
            }
        }
        // Any status, with whatever this header reads as.
        let status = 100 + g.below(500) as u16;
        assert_eq!(
            http_outcome(StatusCode::from_u16(status).unwrap(), &headers),
            documented(status, parsed),
            "case {case}: {status} with {bytes:?}"
        );
        for status in [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
        ] {
            let outcome = http_outcome(status, &headers);
            for retry in 1..4 {
                let wait = Backoff::DEFAULT.delay(retry, outcome, &mut rng);
                assert!(
                    wait <= cap,
                    "case {case}: {bytes:?} waits {wait} (cap {cap})"
                );
            }
        }
    }
}

#[test]
fn retry_after_reads_delay_seconds_back_saturating() {
    let mut g = Gen::new(2);
    for case in 0..CASES {
        let secs = g.number();
        let text = format!("{}{secs}{}", g.pad(), g.pad());
        let headers = with(RETRY_AFTER, HeaderValue::from_str(&text).unwrap());
        assert_eq!(
            retry_after(&headers),
            Some(Duration::from_secs(secs)),
            "case {case}: {text:?}"
        );
    }
    // Too large for a `u64`: not a number of seconds, and not a date either.
    let headers = with(
        RETRY_AFTER,
        HeaderValue::from_static("18446744073709551616"),
    );
    assert_eq!(retry_after(&headers), None);
}

#[test]
fn retry_after_reads_an_http_date_back_as_the_time_left() {
    let mut g = Gen::new(3);
    for case in 0..2_000 {
        let ahead = g.below(100_000);
        let at = SystemTime::now() + StdDuration::from_secs(ahead);
        let text = format!("{}{}{}", g.pad(), httpdate::fmt_http_date(at), g.pad());
        let headers = with(RETRY_AFTER, HeaderValue::from_str(&text).unwrap());
        let d = retry_after(&headers).unwrap_or_else(|| panic!("case {case}: {text:?}"));
        // The date has whole seconds and the clock moves on while the test runs.
        assert!(d <= Duration::from_secs(ahead), "case {case}: {text:?} {d}");
        assert!(
            d + Duration::from_secs(2) >= Duration::from_secs(ahead),
            "case {case}: {text:?} {d}"
        );
        // A date in the past asks for no wait.
        let past = SystemTime::now() - StdDuration::from_secs(ahead + 1);
        let headers = with(
            RETRY_AFTER,
            HeaderValue::from_str(&httpdate::fmt_http_date(past)).unwrap(),
        );
        assert_eq!(retry_after(&headers), Some(Duration::ZERO), "case {case}");
    }
}

#[test]
fn retry_after_refuses_what_is_neither_seconds_nor_a_date() {
    for text in [
        "",
        " ",
        "-1",
        "1.5",
        "1e3",
        "soon",
        "0x10",
        "1 2",
        "Wed, 32 Oct 2015 07:28:00 GMT",
    ] {
        let headers = with(RETRY_AFTER, HeaderValue::from_str(text).unwrap());
        assert_eq!(retry_after(&headers), None, "{text:?}");
        assert_eq!(
            http_outcome(StatusCode::SERVICE_UNAVAILABLE, &headers),
            Outcome::Transient,
            "{text:?}"
        );
    }
    // Bytes that are not visible ASCII cannot be read as text at all.
    let headers = with(RETRY_AFTER, HeaderValue::from_bytes(b"\xff5").unwrap());
    assert_eq!(retry_after(&headers), None);
}

fn adopted(value: HeaderValue) -> Option<Duration> {
    let rules = HttpRequests::default().adopt_from(DEADLINE_HEADER);
    let mut req = Request::get("/").body(()).unwrap();
    req.headers_mut().insert(DEADLINE_HEADER, value);
    rules.incoming_deadline(&req)
}

#[test]
fn the_deadline_header_never_panics_and_reads_only_whole_milliseconds() {
    let mut g = Gen::new(4);
    for case in 0..CASES {
        let bytes = g.value();
        let Ok(value) = HeaderValue::from_bytes(&bytes) else {
            continue;
        };
        let Some(d) = adopted(value) else {
            continue;
        };
        // Whatever was read is a whole number of milliseconds written in digits.
        let text = std::str::from_utf8(&bytes).unwrap().trim();
        let digits = text.trim_start_matches('+');
        assert!(
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
            "case {case}: {bytes:?} read as {d}"
        );
        assert_eq!(
            Duration::from_millis(digits.parse().unwrap()),
            d,
            "case {case}"
        );
    }
}

#[test]
fn the_deadline_header_reads_milliseconds_back_saturating() {
    let mut g = Gen::new(5);
    for case in 0..CASES {
        let ms = g.number();
        let text = format!("{}{ms}{}", g.pad(), g.pad());
        assert_eq!(
            adopted(HeaderValue::from_str(&text).unwrap()),
            Some(Duration::from_millis(ms)),
            "case {case}: {text:?}"
        );
    }
    for text in ["", "-5", "1.5", "soon", "18446744073709551616"] {
        assert_eq!(
            adopted(HeaderValue::from_str(text).unwrap()),
            None,
            "{text:?}"
        );
    }
    // Without `adopt_from`, the header is not read at all.
    let mut req = Request::get("/").body(()).unwrap();
    req.headers_mut()
        .insert(DEADLINE_HEADER, HeaderValue::from_static("5"));
    assert_eq!(HttpRequests::default().incoming_deadline(&req), None);
}

/// The layer adopting whatever deadline arrives: a huge one is held to the policy's own (the
/// attempt is cut off there), zero ends the call at once rather than stalling it, and none of
/// them panics.
#[tokio::test(start_paused = true)]
async fn an_adopted_deadline_is_held_to_the_policys_and_zero_ends_the_call_at_once() {
    let policy = Policy::builder("adopt")
        .no_breaker()
        .max_attempts(1)
        .no_attempt_timeout()
        .deadline(StdDuration::from_secs(2))
        .build()
        .unwrap();
    let slow = tower::service_fn(|_req: Request<()>| async {
        tokio::time::sleep(StdDuration::from_secs(60)).await;
        Ok::<_, std::convert::Infallible>(Response::new(()))
    });
    let client = PolicyLayer::new(policy).adopt_deadline().layer(slow);
    for (text, ends_after) in [
        ("18446744073709551615", StdDuration::from_secs(2)),
        ("99999999", StdDuration::from_secs(2)),
        ("250", StdDuration::from_millis(250)),
        ("0", StdDuration::ZERO),
    ] {
        let req = Request::get("/")
            .header(DEADLINE_HEADER, text)
            .body(())
            .unwrap();
        let start = tokio::time::Instant::now();
        let r = client.clone().oneshot(req).await;
        assert!(
            matches!(
                r,
                Err(CallError::DeadlineExceeded { .. } | CallError::TimedOut { .. })
            ),
            "{text}: {r:?}"
        );
        assert_eq!(start.elapsed(), ends_after, "{text}");
    }
}

/// The attempt number a server's `NestedRetryLayer` reads, as the request's handler sees it.
async fn inbound_attempt(value: HeaderValue) -> Option<u32> {
    let server =
        NestedRetryLayer::new("server").layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, std::convert::Infallible>(inbound_retry())
        }));
    let mut req = Request::get("/").body(()).unwrap();
    req.headers_mut().insert(ATTEMPT_HEADER, value);
    server.oneshot(req).await.unwrap()
}

#[tokio::test]
async fn the_attempt_header_never_panics_and_reads_only_a_short_run_of_digits() {
    let mut g = Gen::new(7);
    for case in 0..CASES {
        let bytes = g.value();
        let Ok(value) = HeaderValue::from_bytes(&bytes) else {
            continue;
        };
        let Some(n) = inbound_attempt(value).await else {
            continue;
        };
        // Read only from at most nine ASCII digits, and only a retry (2 or more) is one.
        assert!(
            bytes.len() <= 9 && bytes.iter().all(u8::is_ascii_digit),
            "case {case}: {bytes:?} read as {n}"
        );
        assert!(n >= 2, "case {case}");
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap().parse::<u32>().unwrap(),
            n
        );
    }
    // What a client writes reads back.
    for n in [2u32, 3, 17, 999_999_999] {
        assert_eq!(inbound_attempt(HeaderValue::from(n)).await, Some(n));
    }
    assert_eq!(inbound_attempt(HeaderValue::from(1u32)).await, None);
}

/// The label a server's `NestedRetryLayer` (letting callers claim up to `max`) reads from
/// `value`, as the request's handler sees it.
async fn inbound_label(value: HeaderValue, max: Criticality) -> Option<Criticality> {
    let server = NestedRetryLayer::new("server")
        .max_criticality(max)
        .layer(tower::service_fn(|req: Request<()>| async move {
            let seen = inbound_criticality();
            assert_eq!(req.extensions().get::<Criticality>().copied(), seen);
            Ok::<_, std::convert::Infallible>(seen)
        }));
    let mut req = Request::get("/").body(()).unwrap();
    req.headers_mut().insert(CRITICALITY_HEADER, value);
    server.oneshot(req).await.unwrap()
}

#[tokio::test]
async fn the_criticality_header_never_panics_and_reads_only_a_known_word_capped() {
    const WORDS: [&str; 3] = ["sheddable", "default", "critical"];
    let mut g = Gen::new(19);
    for case in 0..CASES / 4 {
        // Random bytes, and now and then a known word in random case with random padding.
        let bytes = if g.below(3) == 0 {
            let word = WORDS[g.below(3) as usize];
            let cased: String = word
                .chars()
                .map(|c| {
                    if g.below(2) == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect();
            format!("{}{cased}{}", g.pad(), g.pad()).into_bytes()
        } else {
            g.value()
        };
        let Ok(value) = HeaderValue::from_bytes(&bytes) else {
            continue;
        };
        let Some(c) = inbound_label(value, Criticality::Default).await else {
            let word = std::str::from_utf8(&bytes).map(|s| s.trim().to_ascii_lowercase());
            assert!(
                word.as_deref().map_or(true, |w| !WORDS.contains(&w)),
                "case {case}: {bytes:?} refused"
            );
            continue;
        };
        // Only a known word reads, and never above the server's cap.
        let word = std::str::from_utf8(&bytes)
            .unwrap()
            .trim()
            .to_ascii_lowercase();
        assert!(WORDS.contains(&word.as_str()), "case {case}: {bytes:?}");
        assert!(c <= Criticality::Default, "case {case}: {c}");
        assert_eq!(
            c,
            Criticality::parse(word.as_bytes())
                .unwrap()
                .capped(Criticality::Default)
        );
    }
    // What a client writes reads back, within the cap.
    for c in [
        Criticality::Sheddable,
        Criticality::Default,
        Criticality::Critical,
    ] {
        let value = HeaderValue::from_static(c.as_str());
        assert_eq!(
            inbound_label(value.clone(), Criticality::Critical).await,
            Some(c)
        );
        let capped = inbound_label(value, Criticality::Sheddable).await;
        assert_eq!(capped, Some(Criticality::Sheddable));
    }
}
