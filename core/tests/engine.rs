//! The policy engine: ordered, named predicates over a context; the first match gives its
//! configuration, and every evaluation is recorded in the decision trail.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use std::cell::RefCell;

use stormguard_core::{
    policy::AddPolicyError, policy::DecisionTrail, policy::PolicyEngine, policy::PolicyRule,
    policy::PolicyVerdict, Name,
};

/// A message's routing context. `seen` records which predicates ran, in order.
#[derive(Default)]
struct Ctx {
    topic: &'static str,
    bytes: usize,
    tenant: Option<&'static str>,
    seen: RefCell<Vec<&'static str>>,
}

impl Ctx {
    fn new(topic: &'static str, bytes: usize) -> Ctx {
        Ctx {
            topic,
            bytes,
            ..Ctx::default()
        }
    }
    fn saw(&self, name: &'static str) {
        self.seen.borrow_mut().push(name);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PredicateError {
    NoTenant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Route {
    queue: &'static str,
}

const fn route(queue: &'static str) -> Route {
    Route { queue }
}

type Engine<const N: usize> = PolicyEngine<Ctx, Route, PredicateError, N>;

/// large, orders, vip (fails without a tenant), default.
fn engine() -> Engine<4> {
    let mut e = Engine::<4>::new();
    e.add(
        "large",
        |c| {
            c.saw("large");
            Ok(c.bytes > 1024)
        },
        route("bulk"),
    )
    .unwrap();
    e.add(
        "orders",
        |c| {
            c.saw("orders");
            Ok(c.topic.starts_with("orders."))
        },
        route("orders"),
    )
    .unwrap();
    e.add(
        "vip",
        |c| {
            c.saw("vip");
            c.tenant
                .map(|t| t == "acme")
                .ok_or(PredicateError::NoTenant)
        },
        route("vip"),
    )
    .unwrap();
    e.add(
        "default",
        |c| {
            c.saw("default");
            Ok(c.topic != "drop")
        },
        route("main"),
    )
    .unwrap();
    e
}

#[track_caller]
fn trail_of<const M: usize>(
    trail: &DecisionTrail<'_, PredicateError, M>,
) -> Vec<(String, PolicyVerdict<PredicateError>)> {
    trail
        .iter()
        .map(|e| (e.policy.to_string(), e.verdict))
        .collect()
}

fn s(name: &str) -> String {
    name.to_string()
}

#[test]
fn policies_are_evaluated_in_the_order_they_were_added() {
    let e = engine();
    let ctx = Ctx {
        tenant: Some("other"),
        ..Ctx::new("billing.paid", 10)
    };
    let _ = e.evaluate(&ctx);
    assert_eq!(*ctx.seen.borrow(), ["large", "orders", "vip", "default"]);
    let names: Vec<&str> = e.policies().iter().map(|p| p.name().as_str()).collect();
    assert_eq!(names, ["large", "orders", "vip", "default"]);
}

#[test]
fn the_first_match_wins_and_later_policies_are_not_evaluated() {
    let e = engine();
    // Both "large" and "orders" would match: the one added first wins.
    let ctx = Ctx::new("orders.created", 4096);
    let d = e.evaluate(&ctx);
    assert_eq!(d.config(), Some(&route("bulk")));
    assert_eq!(d.policy(), Some(&Name::new("large")));
    assert_eq!(d.matched.map(|m| m.position), Some(0));
    assert_eq!(*ctx.seen.borrow(), ["large"]);

    let ctx = Ctx::new("orders.created", 10);
    let d = e.evaluate(&ctx);
    assert_eq!(d.config(), Some(&route("orders")));
    assert_eq!(d.matched.map(|m| m.position), Some(1));
    assert_eq!(*ctx.seen.borrow(), ["large", "orders"]);
}

#[test]
fn the_trail_records_every_evaluation_with_its_verdict() {
    let e = engine();
    let ctx = Ctx {
        tenant: Some("acme"),
        ..Ctx::new("billing.paid", 10)
    };
    let d = e.evaluate(&ctx);
    assert_eq!(d.config(), Some(&route("vip")));
    assert_eq!(
        trail_of(&d.trail),
        [
            (s("large"), PolicyVerdict::NotMatched),
            (s("orders"), PolicyVerdict::NotMatched),
            (s("vip"), PolicyVerdict::Matched),
        ]
    );
    assert!(d.trail.is_complete());
    assert_eq!(d.trail.capacity(), 4);
    assert_eq!(
        d.trail.to_string(),
        "large: not matched, orders: not matched, vip: matched"
    );
    assert_eq!(d.trail.entries()[2].verdict.as_str(), "matched");
}

#[test]
fn a_failing_predicate_is_recorded_and_evaluation_goes_on() {
    let e = engine();
    let ctx = Ctx::new("billing.paid", 10); // no tenant: "vip" cannot decide
    let d = e.evaluate(&ctx);
    assert_eq!(d.config(), Some(&route("main")));
    assert_eq!(
        trail_of(&d.trail),
        [
            (s("large"), PolicyVerdict::NotMatched),
            (s("orders"), PolicyVerdict::NotMatched),
            (s("vip"), PolicyVerdict::Failed(PredicateError::NoTenant)),
            (s("default"), PolicyVerdict::Matched),
        ]
    );
    assert_eq!(
        d.trail.entries()[2].verdict.error(),
        Some(&PredicateError::NoTenant)
    );
    assert_eq!(d.trail.entries()[2].verdict.as_str(), "predicate_failed");
}

#[test]
fn every_predicate_failing_is_no_match_with_every_failure_recorded() {
    let mut e = PolicyEngine::<u8, u8, &'static str, 3>::new();
    e.add("a", |_| Err("a broke"), 1).unwrap();
    e.add("b", |_| Err("b broke"), 2).unwrap();
    let d = e.evaluate(&0);
    assert_eq!(d.matched, None);
    let errors: Vec<_> = d.trail.iter().filter_map(|t| t.verdict.error()).collect();
    assert_eq!(errors, [&"a broke", &"b broke"]);
}

#[test]
fn no_match_returns_none_with_the_full_trail() {
    let e = engine();
    let ctx = Ctx {
        tenant: Some("other"),
        ..Ctx::new("drop", 10)
    };
    let d = e.evaluate(&ctx);
    assert_eq!(d.matched, None);
    assert_eq!(d.config(), None);
    assert_eq!(d.policy(), None);
    assert_eq!(
        trail_of(&d.trail),
        [
            (s("large"), PolicyVerdict::NotMatched),
            (s("orders"), PolicyVerdict::NotMatched),
            (s("vip"), PolicyVerdict::NotMatched),
            (s("default"), PolicyVerdict::NotMatched),
        ]
    );
    assert!(d.trail.is_complete());
}

#[test]
fn an_empty_engine_matches_nothing_and_records_nothing() {
    let e = Engine::<2>::new();
    let d = e.evaluate(&Ctx::new("x", 1));
    assert_eq!(d.matched, None);
    assert!(d.trail.is_empty());
    assert!(e.is_empty());
}

#[test]
fn adding_beyond_capacity_is_a_typed_error_that_hands_the_policy_back() {
    let mut e = PolicyEngine::<u8, u32, (), 2>::new();
    e.add("a", |_| Ok(true), 1).unwrap();
    e.add("b", |_| Ok(true), 2).unwrap();
    let err = e.add("c", |n| Ok(*n > 3), 3).unwrap_err();
    assert!(matches!(err, AddPolicyError::Full(_)));
    assert_eq!(err.policy().name(), &"c");
    assert_eq!(err.to_string(), "policy `c` not added: the engine is full");
    let back = err.into_policy();
    assert_eq!(*back.config(), 3);
    assert_eq!(back.evaluate(&4), Ok(true));
    // Nothing changed.
    assert_eq!(e.len(), 2);
    assert_eq!(e.capacity(), 2);
    // Room again after a removal, and the handed-back policy goes in as it was.
    assert_eq!(e.remove("a").map(|p| *p.config()), Some(1));
    e.push(back).unwrap();
    let names: Vec<&str> = e.policies().iter().map(|p| p.name().as_str()).collect();
    assert_eq!(names, ["b", "c"]);
}

#[test]
fn a_zero_capacity_engine_refuses_every_policy() {
    let mut e = PolicyEngine::<u8, (), (), 0>::new();
    assert!(matches!(
        e.add("a", |_| Ok(true), ()),
        Err(AddPolicyError::Full(_))
    ));
}

#[test]
fn a_policy_under_a_name_already_taken_is_refused_and_handed_back() {
    let mut e = PolicyEngine::<u8, u32, (), 4>::new();
    e.add("a", |_| Ok(false), 1).unwrap();
    let err = e
        .add(Name::try_from_str("a").unwrap(), |_| Ok(true), 2)
        .unwrap_err();
    assert!(matches!(err, AddPolicyError::DuplicateName(_)));
    assert_eq!(*err.into_policy().config(), 2);
    assert_eq!(e.len(), 1);
    assert_eq!(e.get("a").map(|p| *p.config()), Some(1));
}

#[test]
fn removing_a_policy_keeps_the_others_in_order() {
    let mut e = engine();
    assert!(e.remove("orders").is_some());
    assert!(e.remove("orders").is_none());
    let ctx = Ctx {
        tenant: Some("acme"),
        ..Ctx::new("orders.created", 10)
    };
    assert_eq!(e.evaluate(&ctx).config(), Some(&route("vip")));
    assert_eq!(*ctx.seen.borrow(), ["large", "vip"]);
    e.clear();
    assert!(e.is_empty());
}

#[test]
fn a_trail_shorter_than_the_evaluation_counts_what_it_omitted() {
    let e = engine();
    let ctx = Ctx::new("billing.paid", 10);
    let mut trail = DecisionTrail::<PredicateError, 2>::new();
    let m = e.evaluate_into(&ctx, &mut trail);
    // Evaluation is not cut short by a full trail.
    assert_eq!(m.map(|m| *m.config), Some(route("main")));
    assert_eq!(*ctx.seen.borrow(), ["large", "orders", "vip", "default"]);
    assert_eq!(trail.len(), 2);
    assert_eq!(trail.omitted(), 2);
    assert!(!trail.is_complete());
    assert_eq!(
        trail.to_string(),
        "large: not matched, orders: not matched (+2 omitted)"
    );
}

#[test]
fn one_trail_can_follow_a_context_through_several_engines() {
    let mut topics = PolicyEngine::<Ctx, &'static str, PredicateError, 2>::new();
    topics
        .add(
            "orders-topic",
            |c| Ok(c.topic.starts_with("orders.")),
            "orders",
        )
        .unwrap();
    let mut sizes = PolicyEngine::<Ctx, &'static str, PredicateError, 2>::new();
    sizes.add("small", |c| Ok(c.bytes < 100), "inline").unwrap();
    let ctx = Ctx::new("orders.created", 10);
    let mut trail = DecisionTrail::<PredicateError, 4>::new();
    let topic = topics.evaluate_into(&ctx, &mut trail).map(|m| *m.config);
    let size = sizes.evaluate_into(&ctx, &mut trail).map(|m| *m.config);
    assert_eq!((topic, size), (Some("orders"), Some("inline")));
    assert_eq!(
        trail_of(&trail),
        [
            (s("orders-topic"), PolicyVerdict::Matched),
            (s("small"), PolicyVerdict::Matched),
        ]
    );
    trail.clear();
    assert!(trail.is_empty());
}

#[test]
fn capturing_predicates_work_through_borrowed_dyn_fn() {
    // Thresholds read from configuration at run time: captured, borrowed, never allocated.
    let threshold = 500usize;
    let big = move |c: &Ctx| -> Result<bool, PredicateError> { Ok(c.bytes > threshold) };
    let prefix = String::from("orders.");
    let orders = |c: &Ctx| -> Result<bool, PredicateError> { Ok(c.topic.starts_with(&prefix)) };
    type Dyn<'a> = &'a dyn Fn(&Ctx) -> Result<bool, PredicateError>;
    let mut e = PolicyEngine::<Ctx, Route, PredicateError, 2, Dyn<'_>>::new();
    e.add("big", &big, route("bulk")).unwrap();
    e.add("orders", &orders, route("orders")).unwrap();
    assert_eq!(
        e.evaluate(&Ctx::new("orders.x", 10)).config(),
        Some(&route("orders"))
    );
    assert_eq!(
        e.evaluate(&Ctx::new("orders.x", 600)).config(),
        Some(&route("bulk"))
    );
}

#[test]
fn the_rule_runs_over_any_slice_of_policies() {
    let policies: Vec<PolicyRule<u32, &str, ()>> = vec![
        PolicyRule::new("zero", |n| Ok(*n == 0), "zero"),
        PolicyRule::new("even", |n| Ok(n % 2 == 0), "even"),
        PolicyRule::new("any", |_| Ok(true), "odd"),
    ];
    let mut trail = DecisionTrail::<(), 3>::new();
    let m = PolicyRule::first_match(&policies, &7, &mut trail).unwrap();
    assert_eq!((*m.config, m.position, m.name.as_str()), ("odd", 2, "any"));
    assert_eq!(trail.len(), 3);
}

#[test]
fn evaluation_changes_nothing_and_can_be_repeated() {
    let e = engine();
    let first = trail_of(&e.evaluate(&Ctx::new("orders.a", 1)).trail);
    let again = trail_of(&e.evaluate(&Ctx::new("orders.a", 1)).trail);
    assert_eq!(first, again);
    assert_eq!(e.len(), 4);
}

#[test]
fn policies_named_from_configuration_are_recorded_by_name() {
    let mut e = PolicyEngine::<u8, u8, (), 2>::new();
    let name = Name::try_from_str(&format!("tenant-{}", 42)).unwrap();
    e.add(name, |_| Ok(true), 1).unwrap();
    let d = e.evaluate(&0);
    assert_eq!(d.trail.entries()[0].policy, &"tenant-42");
}

#[test]
fn an_engine_and_its_decisions_are_send_and_sync_for_plain_types() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PolicyEngine<u32, u32, (), 8>>();
    send_sync::<DecisionTrail<'static, (), 8>>();
}
