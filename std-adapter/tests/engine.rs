//! The growable policy engine: the core's rule (order, first match, a trail of every
//! evaluation, failing predicates passed over, no match) with no limit on the policies.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use stormguard_core::{policy::PolicyVerdict, Name};
use stormguard_std::engine::{AddError, Trail};
use stormguard_std::PolicyEngine;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Missing(&'static str);

struct Req {
    path: &'static str,
    tenant: Option<&'static str>,
    bytes: usize,
}

fn req(path: &'static str, tenant: Option<&'static str>, bytes: usize) -> Req {
    Req {
        path,
        tenant,
        bytes,
    }
}

fn routing() -> PolicyEngine<Req, &'static str, Missing> {
    let mut e = PolicyEngine::new();
    e.add(
        "vip",
        |r: &Req| r.tenant.map(|t| t == "acme").ok_or(Missing("tenant")),
        "vip-lane",
    )
    .unwrap();
    e.add("large", |r: &Req| Ok(r.bytes > 1024), "bulk")
        .unwrap();
    e.add("admin", |r: &Req| Ok(r.path.starts_with("/admin")), "admin")
        .unwrap();
    e.add("default", |_: &Req| Ok(true), "main").unwrap();
    e
}

fn verdicts<'a>(trail: &'a Trail<'_, Missing>) -> Vec<(&'a str, &'static str)> {
    trail
        .iter()
        .map(|e| (e.policy.as_str(), e.verdict.as_str()))
        .collect()
}

#[test]
fn policies_are_evaluated_in_the_order_they_were_added() {
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut e: PolicyEngine<u8, u8, ()> = PolicyEngine::new();
    for (i, name) in ["c", "a", "b"].into_iter().enumerate() {
        let order = Arc::clone(&order);
        e.add(
            name,
            move |_: &u8| {
                order.lock().unwrap().push(name);
                Ok(false)
            },
            u8::try_from(i).unwrap(),
        )
        .unwrap();
    }
    assert!(e.evaluate(&0).matched.is_none());
    assert_eq!(*order.lock().unwrap(), ["c", "a", "b"]);
    let names: Vec<_> = e.policies().iter().map(|p| p.name().as_str()).collect();
    assert_eq!(names, ["c", "a", "b"]);
}

#[test]
fn the_first_match_wins_and_nothing_after_it_is_evaluated() {
    let later = Arc::new(AtomicUsize::new(0));
    let mut e = routing();
    let seen = Arc::clone(&later);
    e.add(
        "after-default",
        move |_: &Req| {
            seen.fetch_add(1, Ordering::Relaxed);
            Ok(true)
        },
        "never",
    )
    .unwrap();
    // Both "large" and "admin" and "default" would match: "large" comes first.
    let d = e.evaluate(&req("/admin/x", Some("other"), 4096));
    assert_eq!(d.config(), Some(&"bulk"));
    assert_eq!(d.policy().map(Name::as_str), Some("large"));
    assert_eq!(d.matched.unwrap().position, 1);
    assert_eq!(
        verdicts(&d.trail),
        [("vip", "not_matched"), ("large", "matched")]
    );
    let d = e.evaluate(&req("/", Some("other"), 1));
    assert_eq!(d.config(), Some(&"main"));
    assert_eq!(later.load(Ordering::Relaxed), 0);
}

#[test]
fn the_trail_records_every_evaluation_with_its_verdict() {
    let e = routing();
    let d = e.evaluate(&req("/admin/users", Some("globex"), 10));
    assert_eq!(d.config(), Some(&"admin"));
    assert_eq!(
        verdicts(&d.trail),
        [
            ("vip", "not_matched"),
            ("large", "not_matched"),
            ("admin", "matched")
        ]
    );
    assert_eq!(
        d.trail.to_string(),
        "vip: not matched, large: not matched, admin: matched"
    );
    assert_eq!(d.trail.len(), 3);
    assert!(!d.trail.is_empty());
}

#[test]
fn a_failing_predicate_is_recorded_with_its_error_and_evaluation_goes_on() {
    let e = routing();
    let d = e.evaluate(&req("/", None, 10));
    assert_eq!(d.config(), Some(&"main"));
    assert_eq!(
        d.trail.entries()[0].verdict,
        PolicyVerdict::Failed(Missing("tenant"))
    );
    assert_eq!(
        d.trail.entries()[0].verdict.error(),
        Some(&Missing("tenant"))
    );
    assert_eq!(
        d.trail.to_string(),
        "vip: predicate failed, large: not matched, admin: not matched, default: matched"
    );
}

#[test]
fn no_match_is_reported_with_the_full_trail() {
    let mut e = routing();
    assert!(e.remove("default").is_some());
    let d = e.evaluate(&req("/", None, 1));
    assert_eq!(d.matched, None);
    assert_eq!(d.config(), None);
    assert_eq!(d.policy(), None);
    assert_eq!(
        verdicts(&d.trail),
        [
            ("vip", "predicate_failed"),
            ("large", "not_matched"),
            ("admin", "not_matched")
        ]
    );
    let empty: PolicyEngine<Req, u8, Missing> = PolicyEngine::new();
    let d = empty.evaluate(&req("/", None, 1));
    assert!(d.matched.is_none() && d.trail.is_empty());
}

#[test]
fn the_engine_grows_past_any_fixed_size_with_exact_positions_and_a_complete_trail() {
    // Lighter under miri, which interprets every step; still past four 32-policy chunks.
    const N: usize = if cfg!(miri) { 130 } else { 1_000 };
    let mut e: PolicyEngine<usize, usize, String> = PolicyEngine::with_capacity(4).unwrap();
    for i in 0..N {
        // Every seventh predicate fails; policy i matches only the context i.
        let name = Name::try_from_str(&format!("p{i}")).unwrap();
        e.add(
            name,
            move |c: &usize| {
                if i % 7 == 3 {
                    Err(format!("p{i} broken"))
                } else {
                    Ok(*c == i)
                }
            },
            i * 10,
        )
        .unwrap();
    }
    assert_eq!(e.len(), N);
    // Around the internal chunk boundaries and at the very end.
    for target in [0, 30, 31, 32, 33, 63, 64, 65, N / 2, N - 1] {
        if target % 7 == 3 {
            continue;
        }
        let d = e.evaluate(&target);
        let m = d.matched.expect("a match");
        assert_eq!(m.position, target);
        assert_eq!(*m.config, target * 10);
        assert_eq!(m.name.as_str(), format!("p{target}"));
        assert_eq!(
            d.trail.len(),
            target + 1,
            "every evaluation up to the match"
        );
        for (i, entry) in d.trail.iter().enumerate() {
            assert_eq!(entry.policy.as_str(), format!("p{i}"));
            let expected = if i == target {
                PolicyVerdict::Matched
            } else if i % 7 == 3 {
                PolicyVerdict::Failed(format!("p{i} broken"))
            } else {
                PolicyVerdict::NotMatched
            };
            assert_eq!(entry.verdict, expected);
        }
    }
    let d = e.evaluate(&N);
    assert!(d.matched.is_none());
    assert_eq!(d.trail.len(), N);
    assert_eq!(
        d.trail
            .iter()
            .filter(|e| matches!(e.verdict, PolicyVerdict::Failed(_)))
            .count(),
        (0..N).filter(|i| i % 7 == 3).count()
    );
}

#[test]
fn names_are_unique_and_a_refused_policy_is_handed_back() {
    let mut e = routing();
    let err: AddError<Req, &str, Missing> =
        e.add("large", |_: &Req| Ok(true), "other").unwrap_err();
    assert_eq!(err.policy().name().as_str(), "large");
    assert_eq!(*err.into_policy().config(), "other");
    assert_eq!(e.len(), 4);
    assert!(e.get("large").is_some());
    assert!(e.get("nope").is_none());
}

#[test]
fn removing_a_policy_keeps_the_others_in_order() {
    let mut e = routing();
    let removed = e.remove("large").unwrap();
    assert_eq!(*removed.config(), "bulk");
    assert!(e.remove("large").is_none());
    let d = e.evaluate(&req("/admin", Some("x"), 4096));
    assert_eq!(d.config(), Some(&"admin"));
    assert_eq!(
        verdicts(&d.trail),
        [("vip", "not_matched"), ("admin", "matched")]
    );
    e.clear();
    assert!(e.is_empty());
}

#[test]
fn a_trail_can_collect_several_engines_in_turn() {
    let first = routing();
    let mut second: PolicyEngine<Req, &str, Missing> = PolicyEngine::new();
    second.add("fallback", |_: &Req| Ok(true), "spare").unwrap();
    let mut trail = Trail::new();
    let r = req("/", Some("x"), 1);
    assert!(first.evaluate_into(&r, &mut trail).is_some());
    let m = second.evaluate_into(&r, &mut trail).unwrap();
    assert_eq!(m.position, 0);
    assert_eq!(trail.len(), 5);
    assert_eq!(trail.entries()[4].policy.as_str(), "fallback");
    trail.clear();
    assert!(trail.is_empty());
}

#[test]
fn an_engine_is_shared_across_threads() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    let e = Arc::new(routing());
    send_sync(&*e);
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let e = Arc::clone(&e);
            std::thread::spawn(move || {
                let bytes = if t % 2 == 0 { 4096 } else { 1 };
                (0..100)
                    .map(|_| *e.evaluate(&req("/", Some("x"), bytes)).config().unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        let got = h.join().unwrap();
        let want = if t % 2 == 0 { "bulk" } else { "main" };
        assert!(got.iter().all(|g| *g == want));
    }
}

#[test]
fn a_rule_with_a_blank_or_control_character_name_is_refused() {
    let mut engine: PolicyEngine<(), u8, ()> = PolicyEngine::new();
    for name in ["", "  ", "db\nup 1"] {
        let e = engine.add(name, |_: &()| Ok(true), 7).unwrap_err();
        assert!(
            matches!(e, AddError::<(), u8, ()>::InvalidName(..)),
            "{name:?}: {e}"
        );
        assert_eq!(*e.into_policy().config(), 7);
    }
    assert!(engine.is_empty());
}
