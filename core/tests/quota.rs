//! Property tests of the published-quota parsers (`RateLimit`, `RateLimit-Policy`, the counts
//! and resets of `RateLimit-*` and `X-RateLimit-*`, and all of them read from a response's
//! fields), the HTTP value parsers (`Retry-After`'s
//! seconds, the deadline header) and the quota rule: whatever bytes a peer sends, nothing
//! panics and what is read is bounded; whatever a server publishes, a known quota only
//! tightens and no refusal asks for a wait past the longest one.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::limits::{Quota, QuotaSettings, SharedQuota};
use stormguard_core::part::Limit;
use stormguard_core::wire::http::{parse_delay_seconds, parse_millis};
use stormguard_core::wire::quota::{
    parse_count, parse_fields, parse_ratelimit, parse_reset, Published, MAX_VALUE, UNIX_TIME_FROM,
};
use stormguard_core::{Duration, Instant, Ratio, RefusalReason};

/// The largest number of 15 digits.
const MAX_15: u64 = 999_999_999_999_999;

/// Bytes biased towards the grammar the parsers read (digits, quotes, separators, parameter
/// keys), and now and then any byte at all.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => b'0'..=b'9',
        3 => prop::sample::select(&b"\";=, \t.:?*-qrtwlimaeds\\"[..]),
        1 => any::<u8>(),
    ];
    prop::collection::vec(byte, 0..48)
}

/// A well-formed `RateLimit` member with chosen numbers, to check what is read back.
fn member(name: &str, r: u64, t: u64) -> String {
    format!("\"{name}\";r={r};t={t}")
}

/// The fields a quota is published in, and one that is not.
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

/// A response's header fields: names from [`NAMES`] (now and then repeated), values biased
/// towards the parsers' grammar.
fn fields() -> impl Strategy<Value = Vec<(usize, Vec<u8>)>> {
    prop::collection::vec((0..NAMES.len(), header_bytes()), 0..12)
}

/// `fields` as `parse_fields` takes them, each name spelled lower-case or upper-case.
fn spelled(fields: &[(usize, Vec<u8>)], upper: bool) -> Vec<(Vec<u8>, &[u8])> {
    fields
        .iter()
        .map(|(i, v)| {
            let name = if upper {
                NAMES[*i].to_ascii_uppercase()
            } else {
                NAMES[*i].to_string()
            };
            (name.into_bytes(), v.as_slice())
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 16 } else { 2048 }))]

    #[test]
    fn the_parsers_never_panic_and_stay_bounded(
        value in header_bytes(),
        policy in header_bytes(),
        unix in any::<Option<u64>>(),
    ) {
        if let Some(n) = parse_count(&value) {
            prop_assert!(n <= MAX_15);
        }
        if let Some(d) = parse_reset(&value, unix) {
            // Seconds of at most 15 digits and a rounded-up millisecond.
            prop_assert!(d <= Duration::from_secs(MAX_15) + Duration::from_secs(1));
        }
        if let Some(p) = parse_ratelimit(&value, Some(&policy)) {
            prop_assert!(p.remaining.is_some());
            prop_assert!(p.remaining.unwrap() <= MAX_15);
            prop_assert!(p.limit.is_none_or(|l| l <= MAX_15));
            prop_assert!(p.reset.is_none_or(|r| r <= Duration::from_secs(MAX_15)));
        }
        let _ = parse_delay_seconds(&value);
        let _ = parse_millis(&value);
    }

    /// A response's fields read the same in any order and whatever the case of their names;
    /// what they publish is bounded as each parser's reading is, and the clock is read once
    /// per reset field present, no more.
    #[test]
    fn fields_read_alike_in_any_order_and_any_case(
        fields in fields(),
        unix in any::<Option<u64>>(),
    ) {
        let mut reads = 0;
        let lower = spelled(&fields, false);
        let read = parse_fields(lower.iter().map(|(n, v)| (n.as_slice(), *v)), || {
            reads += 1;
            unix
        });
        let resets = [4, 7]
            .iter()
            .filter(|&&r| fields.iter().filter(|(i, _)| *i == r).count() == 1)
            .count();
        prop_assert_eq!(reads, resets);
        let upper = spelled(&fields, true);
        let reversed = parse_fields(upper.iter().rev().map(|(n, v)| (n.as_slice(), *v)), || unix);
        prop_assert_eq!(read, reversed);
        prop_assert!(read.limit.is_none_or(|l| l <= MAX_15));
        prop_assert!(read.remaining.is_none_or(|r| r <= MAX_15));
        prop_assert!(read.reset.is_none_or(|r| r <= Duration::from_secs(MAX_15 + 1)));
    }

    /// A field given twice is ambiguous: the response reads as if it had not given it.
    #[test]
    fn a_repeated_field_reads_as_if_absent(fields in fields(), twice in 0..8usize, value in header_bytes()) {
        let without: Vec<(usize, Vec<u8>)> =
            fields.iter().filter(|(i, _)| *i != twice).cloned().collect();
        let mut with = without.clone();
        with.push((twice, value.clone()));
        with.insert(0, (twice, value));
        let read = |f: &[(usize, Vec<u8>)]| {
            let s = spelled(f, false);
            parse_fields(s.iter().map(|(n, v)| (n.as_slice(), *v)), || Some(1_700_000_000))
        };
        prop_assert_eq!(read(&with), read(&without));
    }

    #[test]
    fn a_value_past_the_length_bound_is_never_read(pad in (MAX_VALUE - 4)..(MAX_VALUE + 8)) {
        let mut value = b"7".to_vec();
        value.resize(pad, b' ');
        let read = parse_count(&value).is_some();
        prop_assert_eq!(read, pad <= MAX_VALUE);
    }

    #[test]
    fn well_formed_fields_read_back_the_tightest_policy(
        policies in prop::collection::vec((0..MAX_15, 0..100_000u64), 1..8),
    ) {
        let field: Vec<String> = policies
            .iter()
            .enumerate()
            .map(|(i, &(r, t))| member(&format!("p{i}"), r, t))
            .collect();
        let p = parse_ratelimit(field.join(", ").as_bytes(), None).unwrap();
        let fewest = policies.iter().map(|&(r, _)| r).min().unwrap();
        prop_assert_eq!(p.remaining, Some(fewest));
        let first = policies.iter().find(|&&(r, _)| r == fewest).unwrap();
        prop_assert_eq!(p.reset, Some(Duration::from_secs(first.1)));
    }

    #[test]
    fn unix_time_resets_count_from_the_wall_clock(now in UNIX_TIME_FROM..4_000_000_000u64, ahead in 0..100_000u64) {
        let at = (now + ahead).to_string();
        prop_assert_eq!(parse_reset(at.as_bytes(), Some(now)), Some(Duration::from_secs(ahead)));
        prop_assert_eq!(parse_reset(at.as_bytes(), None), None);
    }

    #[test]
    fn seconds_and_millis_read_back(n in any::<u64>()) {
        let text = n.to_string();
        prop_assert_eq!(parse_delay_seconds(text.as_bytes()), Some(Duration::from_secs(n)));
        prop_assert_eq!(parse_millis(text.as_bytes()), Some(Duration::from_millis(n)));
        prop_assert_eq!(parse_millis(format!("-{text}").as_bytes()), None);
        prop_assert_eq!(parse_millis(format!("{text}0").as_bytes()), n.checked_mul(10).map(Duration::from_millis));
    }

    /// Any readings and attempts, at any times: the shared and owned forms agree; while a quota
    /// holds, the allowance never rises and the reset never comes sooner; a refusal is always
    /// the quota's, within the reserve, and asks for no wait past the longest one.
    #[test]
    fn a_known_quota_only_tightens_and_never_stalls_past_the_longest_wait(
        reserve_pct in 0u32..100,
        max_wait_ms in 1u64..120_000,
        ops in prop::collection::vec(
            (any::<bool>(), 0u64..5_000, any::<Option<u16>>(), any::<Option<u16>>(), any::<Option<u32>>()),
            1..80,
        ),
    ) {
        let settings = QuotaSettings::new(
            Ratio::from_percent(reserve_pct).unwrap(),
            Duration::from_millis(max_wait_ms),
        ).unwrap();
        let shared = SharedQuota::new(settings);
        let owned = Quota::new(settings);
        let mut now = Instant::from_secs(10);
        for (read, step_ms, limit, remaining, reset_ms) in ops {
            now += Duration::from_millis(step_ms);
            let before = owned.state();
            if read {
                let published = Published {
                    limit: limit.map(u64::from),
                    remaining: remaining.map(u64::from),
                    reset: reset_ms.map(|ms| Duration::from_millis(u64::from(ms))),
                };
                owned.on_published(now, published);
                shared.on_published(now, published);
                let after = owned.state();
                if before.holds_at(now) {
                    prop_assert!(after.remaining <= before.remaining);
                    prop_assert!(after.floor >= before.floor);
                    prop_assert!(after.until >= before.until);
                }
                if let Some(until) = after.until {
                    // Never further than the longest wait from the latest reading that moved it.
                    prop_assert!(until <= now + settings.max_wait());
                }
            } else {
                let got = owned.take(now);
                prop_assert_eq!(shared.take(now), got);
                if let Err(refused) = got {
                    prop_assert_eq!(refused.reason, RefusalReason::QuotaReserve);
                    prop_assert!(!refused.retry_after.is_zero());
                    prop_assert!(refused.retry_after <= settings.max_wait());
                    prop_assert!(before.remaining <= before.floor);
                } else if before.holds_at(now) {
                    prop_assert_eq!(owned.state().remaining, before.remaining.saturating_sub(1));
                }
            }
            prop_assert_eq!(shared.state(), owned.state());
        }
    }
}
