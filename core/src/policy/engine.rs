//! The policy engine of document 004: ordered, named predicates over a context; the first match
//! gives its configuration, and every evaluation is recorded in a decision trail. See
//! [`PolicyEngine`].

use core::fmt;
use core::marker::PhantomData;

use heapless::Vec;

use crate::name::Name;
use crate::name::NameError;

/// The default predicate type: a function pointer from the context to a match, or an error.
///
/// ```
/// use stormguard_core::policy::PolicyPredicate;
/// const EVEN: PolicyPredicate<u32, ()> = |n| Ok(n % 2 == 0);
/// assert_eq!(EVEN(&4), Ok(true));
/// ```
pub type PolicyPredicate<C, E> = fn(&C) -> Result<bool, E>;

/// One named policy: a predicate over the context `C` and the configuration `T` it gives when it
/// matches. `E` is the predicate's error; `P` the predicate's type (see [`PolicyEngine`] for why
/// it defaults to a function pointer).
///
/// ```
/// use stormguard_core::policy::PolicyRule;
/// let p: PolicyRule<u32, &str, ()> = PolicyRule::new("big", |n| Ok(*n > 100), "slow lane");
/// assert_eq!(p.name(), &"big");
/// assert_eq!(p.evaluate(&500), Ok(true));
/// assert_eq!(*p.config(), "slow lane");
/// ```
pub struct PolicyRule<C, T, E, P = PolicyPredicate<C, E>> {
    name: Name,
    predicate: P,
    config: T,
    _context: PhantomData<fn(&C) -> E>,
}

impl<C, T, E, P> PolicyRule<C, T, E, P> {
    /// A policy called `name` (a `&'static str` or a [`Name`]) that gives `config` when
    /// `predicate` matches.
    pub fn new(name: impl Into<Name>, predicate: P, config: T) -> Self {
        PolicyRule {
            name: name.into(),
            predicate,
            config,
            _context: PhantomData,
        }
    }

    /// The policy's name, as the decision trail records it.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.name
    }

    /// The configuration the policy gives when it matches.
    #[must_use]
    pub const fn config(&self) -> &T {
        &self.config
    }

    /// The predicate.
    #[must_use]
    pub const fn predicate(&self) -> &P {
        &self.predicate
    }

    /// The policy's parts: name, predicate, configuration.
    pub fn into_parts(self) -> (Name, P, T) {
        (self.name, self.predicate, self.config)
    }
}

impl<C, T, E, P: Fn(&C) -> Result<bool, E>> PolicyRule<C, T, E, P> {
    /// Runs the predicate on `context`.
    pub fn evaluate(&self, context: &C) -> Result<bool, E> {
        (self.predicate)(context)
    }

    /// The engine's rule over any slice of policies: evaluates them in order, records each
    /// evaluation in `trail`, and returns the first match. A predicate that fails is recorded as
    /// [`PolicyVerdict::Failed`] and evaluation goes on; policies after the first match are not
    /// evaluated. Evaluations that do not fit in `trail` are counted in
    /// [`DecisionTrail::omitted`].
    ///
    /// ```
    /// use stormguard_core::{policy::DecisionTrail, policy::PolicyRule, policy::PolicyVerdict};
    /// let policies: [PolicyRule<i32, char, ()>; 2] = [
    ///     PolicyRule::new("negative", |n| Ok(*n < 0), '-'),
    ///     PolicyRule::new("any", |_| Ok(true), '+'),
    /// ];
    /// let mut trail = DecisionTrail::<(), 2>::new();
    /// let found = PolicyRule::first_match(&policies, &5, &mut trail);
    /// assert_eq!(found.map(|m| *m.config), Some('+'));
    /// assert_eq!(trail.len(), 2);
    /// ```
    pub fn first_match<'a, const M: usize>(
        policies: &'a [PolicyRule<C, T, E, P>],
        context: &C,
        trail: &mut DecisionTrail<'a, E, M>,
    ) -> Option<PolicyMatch<'a, T>> {
        for (position, policy) in policies.iter().enumerate() {
            let verdict = match policy.evaluate(context) {
                Ok(true) => PolicyVerdict::Matched,
                Ok(false) => PolicyVerdict::NotMatched,
                Err(e) => PolicyVerdict::Failed(e),
            };
            let matched = verdict.is_match();
            trail.record(PolicyEvaluation {
                policy: &policy.name,
                verdict,
            });
            if matched {
                return Some(PolicyMatch {
                    name: &policy.name,
                    config: &policy.config,
                    position,
                });
            }
        }
        None
    }
}

impl<C, T: Clone, E, P: Clone> Clone for PolicyRule<C, T, E, P> {
    fn clone(&self) -> Self {
        PolicyRule {
            name: self.name,
            predicate: self.predicate.clone(),
            config: self.config.clone(),
            _context: PhantomData,
        }
    }
}

impl<C, T: fmt::Debug, E, P> fmt::Debug for PolicyRule<C, T, E, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyRule")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "defmt")]
impl<C, T: defmt::Format, E, P> defmt::Format for PolicyRule<C, T, E, P> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "PolicyRule {{ name: {}, config: {} }}",
            self.name,
            self.config
        );
    }
}

/// What one predicate said about one context.
///
/// ```
/// use stormguard_core::policy::PolicyVerdict;
/// assert!(PolicyVerdict::<()>::Matched.is_match());
/// assert_eq!(PolicyVerdict::Failed("no header").error(), Some(&"no header"));
/// assert_eq!(PolicyVerdict::<()>::NotMatched.as_str(), "not_matched");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum PolicyVerdict<E> {
    /// The predicate matched: its policy's configuration is the decision.
    Matched,
    /// The predicate did not match; evaluation went on.
    NotMatched,
    /// The predicate could not decide; evaluation went on. Carries its error.
    Failed(E),
}

impl<E> PolicyVerdict<E> {
    /// `true` for [`PolicyVerdict::Matched`].
    #[must_use]
    pub const fn is_match(&self) -> bool {
        matches!(self, PolicyVerdict::Matched)
    }

    /// The predicate's error, for [`PolicyVerdict::Failed`].
    #[must_use]
    pub const fn error(&self) -> Option<&E> {
        match self {
            PolicyVerdict::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// A stable, lower-case name for logs and metrics labels.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            PolicyVerdict::Matched => "matched",
            PolicyVerdict::NotMatched => "not_matched",
            PolicyVerdict::Failed(_) => "predicate_failed",
        }
    }
}

impl<E> fmt::Display for PolicyVerdict<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyVerdict::Matched => "matched",
            PolicyVerdict::NotMatched => "not matched",
            PolicyVerdict::Failed(_) => "predicate failed",
        })
    }
}

/// One entry of a decision trail: which policy was evaluated and what its predicate said.
///
/// ```
/// use stormguard_core::{Name, policy::PolicyEvaluation, policy::PolicyVerdict};
/// let name = Name::new("orders");
/// let e: PolicyEvaluation<'_, ()> = PolicyEvaluation { policy: &name, verdict: PolicyVerdict::Matched };
/// assert_eq!(format!("{e}"), "orders: matched");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PolicyEvaluation<'a, E> {
    /// The policy's name.
    pub policy: &'a Name,
    /// What its predicate said.
    pub verdict: PolicyVerdict<E>,
}

impl<E> fmt::Display for PolicyEvaluation<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.policy, self.verdict)
    }
}

/// Every evaluation of a decision (or of several, appended), in order, up to `M` of them;
/// evaluations beyond that are counted, never silently lost.
///
/// ```
/// use stormguard_core::{policy::DecisionTrail, policy::PolicyEngine};
/// let mut engine: PolicyEngine<u8, (), (), 3> = PolicyEngine::new();
/// for name in ["a", "b", "c"] {
///     engine.add(name, |_| Ok(false), ())?;
/// }
/// let mut short = DecisionTrail::<(), 2>::new();
/// assert!(engine.evaluate_into(&0, &mut short).is_none());
/// assert_eq!(short.len(), 2);
/// assert_eq!(short.omitted(), 1);
/// assert!(!short.is_complete());
/// # Ok::<(), stormguard_core::policy::AddPolicyError<u8, (), ()>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DecisionTrail<'a, E, const M: usize> {
    entries: Vec<PolicyEvaluation<'a, E>, M>,
    omitted: usize,
}

impl<'a, E, const M: usize> DecisionTrail<'a, E, M> {
    /// An empty trail with room for `M` evaluations.
    #[must_use]
    pub const fn new() -> Self {
        DecisionTrail {
            entries: Vec::new(),
            omitted: 0,
        }
    }

    /// The recorded evaluations, in the order they ran.
    #[must_use]
    pub fn entries(&self) -> &[PolicyEvaluation<'a, E>] {
        &self.entries
    }

    /// The recorded evaluations, in the order they ran.
    pub fn iter(&self) -> core::slice::Iter<'_, PolicyEvaluation<'a, E>> {
        self.entries.iter()
    }

    /// How many evaluations are recorded.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when nothing is recorded (and nothing omitted).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.omitted == 0
    }

    /// How many evaluations ran after the trail was full and are therefore not recorded.
    #[must_use]
    pub const fn omitted(&self) -> usize {
        self.omitted
    }

    /// `true` when every evaluation is recorded.
    #[must_use]
    pub const fn is_complete(&self) -> bool {
        self.omitted == 0
    }

    /// The most evaluations the trail records.
    #[must_use]
    pub const fn capacity(&self) -> usize {
        M
    }

    /// Forgets every evaluation, recorded or omitted.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.omitted = 0;
    }

    fn record(&mut self, evaluation: PolicyEvaluation<'a, E>) {
        if self.entries.push(evaluation).is_err() {
            self.omitted = self.omitted.saturating_add(1);
        }
    }
}

impl<E, const M: usize> Default for DecisionTrail<'_, E, M> {
    fn default() -> Self {
        DecisionTrail::new()
    }
}

impl<'t, 'a, E, const M: usize> IntoIterator for &'t DecisionTrail<'a, E, M> {
    type Item = &'t PolicyEvaluation<'a, E>;
    type IntoIter = core::slice::Iter<'t, PolicyEvaluation<'a, E>>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

impl<E, const M: usize> fmt::Display for DecisionTrail<'_, E, M> {
    /// E.g. `large: not matched, orders: matched`, with `(+2 omitted)` when it overflowed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{e}")?;
        }
        if self.omitted > 0 {
            write!(f, " (+{} omitted)", self.omitted)?;
        }
        Ok(())
    }
}

/// The policy that matched: its name, its configuration and its place in the engine.
///
/// ```
/// use stormguard_core::policy::PolicyEngine;
/// let mut engine: PolicyEngine<u32, &str, (), 2> = PolicyEngine::new();
/// engine.add("small", |n| Ok(*n < 10), "inline")?;
/// engine.add("any", |_| Ok(true), "spill")?;
/// let m = engine.evaluate(&50).matched.unwrap();
/// assert_eq!((m.name.as_str(), *m.config, m.position), ("any", "spill", 1));
/// # Ok::<(), stormguard_core::policy::AddPolicyError<u32, &str, ()>>(())
/// ```
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PolicyMatch<'a, T> {
    /// The matching policy's name.
    pub name: &'a Name,
    /// Its configuration.
    pub config: &'a T,
    /// Its position in insertion order (0 for the first policy added).
    pub position: usize,
}

impl<T> Clone for PolicyMatch<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for PolicyMatch<'_, T> {}

/// The outcome of one evaluation: the first match, if any, and the full trail.
///
/// ```
/// use stormguard_core::{policy::PolicyEngine, policy::PolicyVerdict};
/// let mut engine: PolicyEngine<u32, &str, (), 2> = PolicyEngine::new();
/// engine.add("small", |n| Ok(*n < 10), "inline")?;
/// let d = engine.evaluate(&50);
/// assert_eq!(d.config(), None); // no match...
/// assert_eq!(d.trail.entries()[0].verdict, PolicyVerdict::NotMatched); // ...and why
/// # Ok::<(), stormguard_core::policy::AddPolicyError<u32, &str, ()>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PolicyDecision<'a, T, E, const M: usize> {
    /// The first policy that matched; `None` when none did.
    pub matched: Option<PolicyMatch<'a, T>>,
    /// Every evaluation, in order.
    pub trail: DecisionTrail<'a, E, M>,
}

impl<'a, T, E, const M: usize> PolicyDecision<'a, T, E, M> {
    /// The matching policy's configuration, if any.
    #[must_use]
    pub fn config(&self) -> Option<&'a T> {
        self.matched.map(|m| m.config)
    }

    /// The matching policy's name, if any.
    #[must_use]
    pub fn policy(&self) -> Option<&'a Name> {
        self.matched.map(|m| m.name)
    }
}

/// Why [`PolicyEngine::add`] refused a policy; either way the policy is handed back.
///
/// ```
/// use stormguard_core::{policy::AddPolicyError, policy::PolicyEngine};
/// let mut engine: PolicyEngine<(), u8, (), 1> = PolicyEngine::new();
/// engine.add("only", |_| Ok(true), 1)?;
/// let err = engine.add("only", |_| Ok(true), 2).unwrap_err();
/// assert!(matches!(err, AddPolicyError::DuplicateName(_)));
/// assert_eq!(err.to_string(), "policy `only` not added: the name is taken");
/// let err = engine.add("second", |_| Ok(true), 3).unwrap_err();
/// assert!(matches!(err, AddPolicyError::Full(_)));
/// assert_eq!(*err.into_policy().config(), 3);
/// # Ok::<(), AddPolicyError<(), u8, ()>>(())
/// ```
#[non_exhaustive]
pub enum AddPolicyError<C, T, E, P = PolicyPredicate<C, E>> {
    /// The engine already holds its capacity of policies.
    Full(PolicyRule<C, T, E, P>),
    /// A policy of the same name is already there: names tell trail entries apart.
    DuplicateName(PolicyRule<C, T, E, P>),
    /// The name is blank or holds a control character (see [`Name::check`]).
    InvalidName(NameError, PolicyRule<C, T, E, P>),
}

impl<C, T, E, P> AddPolicyError<C, T, E, P> {
    /// The refused policy, handed back.
    pub fn into_policy(self) -> PolicyRule<C, T, E, P> {
        match self {
            AddPolicyError::Full(p)
            | AddPolicyError::DuplicateName(p)
            | AddPolicyError::InvalidName(_, p) => p,
        }
    }

    /// The refused policy.
    #[must_use]
    pub fn policy(&self) -> &PolicyRule<C, T, E, P> {
        match self {
            AddPolicyError::Full(p)
            | AddPolicyError::DuplicateName(p)
            | AddPolicyError::InvalidName(_, p) => p,
        }
    }
}

impl<C, T: fmt::Debug, E, P> fmt::Debug for AddPolicyError<C, T, E, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddPolicyError::Full(p) => f.debug_tuple("Full").field(p).finish(),
            AddPolicyError::DuplicateName(p) => f.debug_tuple("DuplicateName").field(p).finish(),
            AddPolicyError::InvalidName(e, p) => {
                f.debug_tuple("InvalidName").field(e).field(p).finish()
            }
        }
    }
}

impl<C, T, E, P> fmt::Display for AddPolicyError<C, T, E, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddPolicyError::Full(p) => {
                write!(f, "policy `{}` not added: the engine is full", p.name)
            }
            AddPolicyError::DuplicateName(p) => {
                write!(f, "policy `{}` not added: the name is taken", p.name)
            }
            AddPolicyError::InvalidName(e, p) => {
                write!(f, "policy {:?} not added: {e}", p.name)
            }
        }
    }
}

impl<C, T: fmt::Debug, E, P> core::error::Error for AddPolicyError<C, T, E, P> {}

#[cfg(feature = "defmt")]
impl<C, T, E, P> defmt::Format for AddPolicyError<C, T, E, P> {
    fn format(&self, f: defmt::Formatter<'_>) {
        match self {
            AddPolicyError::Full(p) => defmt::write!(f, "Full({})", p.name),
            AddPolicyError::DuplicateName(p) => defmt::write!(f, "DuplicateName({})", p.name),
            AddPolicyError::InvalidName(e, p) => {
                defmt::write!(f, "InvalidName({}, {})", e, p.name)
            }
        }
    }
}

/// Ordered, named policies over a context `C`, each giving a configuration `T`; at most `N` of
/// them. Evaluation runs in insertion order; the first policy whose predicate matches gives its
/// configuration, and every evaluation (matched, not matched, or failed) is recorded in a
/// decision trail. `E` is the predicates' error type and `P` their type (function pointers by
/// default, see below).
///
/// Call order: [`add`](PolicyEngine::add) policies in priority order (typically most specific
/// first and a catch-all last), then [`evaluate`](PolicyEngine::evaluate) contexts, as often as
/// you like: evaluation takes `&self` and changes nothing.
///
/// # Shape
/// The engine holds at most `N` policies in a [`heapless::Vec`]: no allocation, and adding a
/// policy beyond the capacity (or under a name already taken) is a typed error that hands the
/// policy back. A trail holds at most `M` evaluations; [`PolicyEngine::evaluate`] gives one with
/// room for every policy, and [`PolicyEngine::evaluate_into`] appends to a trail of the caller's,
/// counting (never hiding) the evaluations that did not fit.
///
/// # Predicates
/// A predicate is `Fn(&C) -> Result<bool, E>`: `Ok(true)` matches, `Ok(false)` does not, and
/// `Err(e)` is a predicate that could not decide (a missing header, a value that does not parse).
/// A failed predicate is recorded as [`PolicyVerdict::Failed`] with its error, and evaluation goes
/// on to the next policy: one broken rule does not take routing down.
///
/// By default predicates are plain function pointers, `fn(&C) -> Result<bool, E>` (the `P`
/// parameter's default). A fixed-capacity list needs one element type, and a function pointer is
/// one word, `Copy`, `'static`, usable in a `const`, and needs neither a lifetime nor an
/// allocation; non-capturing closures coerce to it. A predicate that needs parameters reads them
/// from the context, or from the policy's configuration. Where predicates must capture (a host
/// that builds them from a configuration file), choose `P = &'a dyn Fn(&C) -> Result<bool, E>`:
/// borrowed, still no allocation. The rule itself is [`PolicyRule::first_match`], over any slice of
/// policies, so a growable form (the std adapter's) evaluates with the same code.
///
/// ```
/// use stormguard_core::{policy::PolicyEngine, policy::PolicyVerdict};
///
/// struct Message { topic: &'static str, bytes: usize }
///
/// #[derive(Debug, PartialEq)]
/// struct Route { queue: &'static str }
///
/// let mut engine: PolicyEngine<Message, Route, (), 4> = PolicyEngine::new();
/// engine.add("large", |m| Ok(m.bytes > 1024), Route { queue: "bulk" })?;
/// engine.add("orders", |m| Ok(m.topic.starts_with("orders.")), Route { queue: "orders" })?;
/// engine.add("default", |_| Ok(true), Route { queue: "main" })?;
///
/// let decision = engine.evaluate(&Message { topic: "orders.created", bytes: 10 });
/// assert_eq!(decision.config(), Some(&Route { queue: "orders" }));
/// let trail: Vec<_> = decision.trail.iter().map(|e| (e.policy.as_str(), e.verdict)).collect();
/// assert_eq!(trail, [("large", PolicyVerdict::NotMatched), ("orders", PolicyVerdict::Matched)]);
/// # Ok::<(), stormguard_core::policy::AddPolicyError<Message, Route, ()>>(())
/// ```
///
/// A predicate that cannot decide:
///
/// ```
/// use stormguard_core::{policy::PolicyEngine, policy::PolicyVerdict};
///
/// struct Ctx { tenant: Option<&'static str> }
/// #[derive(Debug)]
/// struct NoTenant;
///
/// let mut engine: PolicyEngine<Ctx, u32, NoTenant, 2> = PolicyEngine::new();
/// engine.add("vip", |c| c.tenant.map(|t| t == "acme").ok_or(NoTenant), 64)?;
/// engine.add("default", |_| Ok(true), 8)?;
///
/// // The first predicate cannot decide without a tenant: recorded, and evaluation goes on.
/// let d = engine.evaluate(&Ctx { tenant: None });
/// assert_eq!(d.config(), Some(&8));
/// assert!(matches!(d.trail.entries()[0].verdict, PolicyVerdict::Failed(NoTenant)));
/// assert_eq!(d.trail.to_string(), "vip: predicate failed, default: matched");
/// # Ok::<(), stormguard_core::policy::AddPolicyError<Ctx, u32, NoTenant>>(())
/// ```
pub struct PolicyEngine<C, T, E, const N: usize, P = PolicyPredicate<C, E>> {
    policies: Vec<PolicyRule<C, T, E, P>, N>,
}

impl<C, T, E, const N: usize, P> PolicyEngine<C, T, E, N, P> {
    /// An engine with no policies (usable in a `const`).
    #[must_use]
    pub const fn new() -> Self {
        PolicyEngine {
            policies: Vec::new(),
        }
    }

    /// Adds a policy after the ones already there: it is evaluated after them. Refused, with the
    /// policy handed back, when its name is blank or holds a control character, or when the
    /// engine holds `N` policies already or one of the same name.
    pub fn add(
        &mut self,
        name: impl Into<Name>,
        predicate: P,
        config: T,
    ) -> Result<(), AddPolicyError<C, T, E, P>> {
        self.push(PolicyRule::new(name, predicate, config))
    }

    /// Adds a policy built beforehand; see [`PolicyEngine::add`].
    pub fn push(
        &mut self,
        policy: PolicyRule<C, T, E, P>,
    ) -> Result<(), AddPolicyError<C, T, E, P>> {
        if let Err(e) = policy.name.check() {
            return Err(AddPolicyError::InvalidName(e, policy));
        }
        if self.get(policy.name.as_str()).is_some() {
            return Err(AddPolicyError::DuplicateName(policy));
        }
        self.policies.push(policy).map_err(AddPolicyError::Full)
    }

    /// The policy called `name`, if any.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&PolicyRule<C, T, E, P>> {
        self.policies.iter().find(|p| p.name == name)
    }

    /// Removes the policy called `name`, keeping the others in order.
    pub fn remove(&mut self, name: &str) -> Option<PolicyRule<C, T, E, P>> {
        let at = self.policies.iter().position(|p| p.name == name)?;
        Some(self.policies.remove(at))
    }

    /// Removes every policy.
    pub fn clear(&mut self) {
        self.policies.clear();
    }

    /// The policies, in evaluation order.
    #[must_use]
    pub fn policies(&self) -> &[PolicyRule<C, T, E, P>] {
        &self.policies
    }

    /// How many policies there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// `true` when there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The most policies the engine holds.
    #[must_use]
    pub const fn capacity(&self) -> usize {
        N
    }
}

impl<C, T, E, const N: usize, P: Fn(&C) -> Result<bool, E>> PolicyEngine<C, T, E, N, P> {
    /// Evaluates the policies in order against `context` and returns the first match (or none)
    /// with the trail of every evaluation. The trail has room for every policy, so it is always
    /// complete.
    pub fn evaluate(&self, context: &C) -> PolicyDecision<'_, T, E, N> {
        let mut trail = DecisionTrail::new();
        let matched = PolicyRule::first_match(&self.policies, context, &mut trail);
        PolicyDecision { matched, trail }
    }

    /// Like [`PolicyEngine::evaluate`], appending the evaluations to `trail` (which may already
    /// hold those of another engine the same context went through). Evaluations beyond the
    /// trail's capacity are counted in [`DecisionTrail::omitted`]; evaluation is not cut short.
    pub fn evaluate_into<'a, const M: usize>(
        &'a self,
        context: &C,
        trail: &mut DecisionTrail<'a, E, M>,
    ) -> Option<PolicyMatch<'a, T>> {
        PolicyRule::first_match(&self.policies, context, trail)
    }
}

impl<C, T, E, const N: usize, P> Default for PolicyEngine<C, T, E, N, P> {
    fn default() -> Self {
        PolicyEngine::new()
    }
}

impl<C, T: Clone, E, const N: usize, P: Clone> Clone for PolicyEngine<C, T, E, N, P> {
    fn clone(&self) -> Self {
        PolicyEngine {
            policies: self.policies.clone(),
        }
    }
}

impl<C, T: fmt::Debug, E, const N: usize, P> fmt::Debug for PolicyEngine<C, T, E, N, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("policies", &self.policies.as_slice())
            .finish()
    }
}

#[cfg(feature = "defmt")]
impl<C, T, E, const N: usize, P> defmt::Format for PolicyEngine<C, T, E, N, P> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "PolicyEngine({=usize} of {=usize})", self.len(), N);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trail_that_overflows_counts_what_it_could_not_hold() {
        let name = Name::new("x");
        let mut trail = DecisionTrail::<(), 1>::new();
        for _ in 0..3 {
            trail.record(PolicyEvaluation {
                policy: &name,
                verdict: PolicyVerdict::NotMatched,
            });
        }
        assert_eq!(trail.len(), 1);
        assert_eq!(trail.omitted(), 2);
        trail.clear();
        assert!(trail.is_empty());
    }
}
