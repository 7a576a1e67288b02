//! A growable policy engine: document 004's ordered, named policies over a context, with no
//! limit on their number and predicates that may capture (boxed closures).
//!
//! The rule is the core's, not a copy of it: evaluation runs
//! [`stormguard_core::policy::PolicyRule::first_match`] over the policies (in chunks of 32, each recorded
//! in the core's fixed-capacity [`DecisionTrail`]), and this module only moves the recorded
//! evaluations into a growable [`Trail`].

use std::fmt;

pub use stormguard_core::policy::PolicyVerdict;
use stormguard_core::{
    policy::AddPolicyError, policy::DecisionTrail, policy::PolicyEvaluation, policy::PolicyMatch,
    policy::PolicyRule as Rule, Bound, Field, Name, SettingsError,
};

/// A predicate of the growable engine: any closure from the context to a match (`Ok(true)`),
/// no match (`Ok(false)`) or an error (the predicate could not decide). Boxed: the core's rule
/// calls a predicate through `Fn`, which a `Box<dyn Fn>` implements (an `Arc<dyn Fn>` does not).
pub type Predicate<C, E> = Box<dyn Fn(&C) -> Result<bool, E> + Send + Sync>;

/// One named policy of a [`PolicyEngine`]: the core's [`PolicyRule`](stormguard_core::policy::PolicyRule) with a
/// boxed predicate.
pub type EnginePolicy<C, T, E> = Rule<C, T, E, Predicate<C, E>>;

/// How many policies one pass through the core's rule covers; the trail of each pass has room
/// for all of them, so nothing is ever omitted.
const CHUNK: usize = 32;

/// Every evaluation of one decision (or of several, appended), in the order they ran, with no
/// limit: the growable form of the core's [`DecisionTrail`].
///
/// ```
/// use stormguard_std::PolicyEngine;
/// let mut engine: PolicyEngine<u32, &str, ()> = PolicyEngine::new();
/// engine.add("small", |n: &u32| Ok(*n < 10), "inline")?;
/// engine.add("any", |_: &u32| Ok(true), "spill")?;
/// let d = engine.evaluate(&50);
/// assert_eq!(d.trail.to_string(), "small: not matched, any: matched");
/// assert_eq!(d.trail.len(), 2);
/// # Ok::<(), stormguard_std::engine::AddError<u32, &str, ()>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trail<'a, E> {
    entries: Vec<PolicyEvaluation<'a, E>>,
}

impl<'a, E> Trail<'a, E> {
    /// An empty trail.
    #[must_use]
    pub const fn new() -> Self {
        Trail {
            entries: Vec::new(),
        }
    }

    /// The evaluations, in the order they ran.
    #[must_use]
    pub fn entries(&self) -> &[PolicyEvaluation<'a, E>] {
        &self.entries
    }

    /// The evaluations, in the order they ran.
    pub fn iter(&self) -> std::slice::Iter<'_, PolicyEvaluation<'a, E>> {
        self.entries.iter()
    }

    /// How many evaluations are recorded.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when nothing is recorded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every evaluation.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The evaluations, owned.
    #[must_use]
    pub fn into_entries(self) -> Vec<PolicyEvaluation<'a, E>> {
        self.entries
    }
}

impl<E> Default for Trail<'_, E> {
    fn default() -> Self {
        Trail::new()
    }
}

impl<'t, 'a, E> IntoIterator for &'t Trail<'a, E> {
    type Item = &'t PolicyEvaluation<'a, E>;
    type IntoIter = std::slice::Iter<'t, PolicyEvaluation<'a, E>>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

impl<E> fmt::Display for Trail<'_, E> {
    /// As the core's trail: `large: not matched, orders: matched`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// The outcome of one evaluation: the first match, if any, and every evaluation that ran.
///
/// ```
/// use stormguard_std::engine::PolicyVerdict;
/// use stormguard_std::PolicyEngine;
/// let mut engine: PolicyEngine<u32, &str, ()> = PolicyEngine::new();
/// engine.add("small", |n: &u32| Ok(*n < 10), "inline")?;
/// let d = engine.evaluate(&50);
/// assert_eq!(d.config(), None); // no match...
/// assert_eq!(d.trail.entries()[0].verdict, PolicyVerdict::NotMatched); // ...and why
/// # Ok::<(), stormguard_std::engine::AddError<u32, &str, ()>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision<'a, T, E> {
    /// The first policy that matched; `None` when none did.
    pub matched: Option<PolicyMatch<'a, T>>,
    /// Every evaluation, in order.
    pub trail: Trail<'a, E>,
}

impl<'a, T, E> Decision<'a, T, E> {
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

/// Why [`PolicyEngine::add`] refused a policy (the core's error; the growable engine is never
/// full, so it is [`AddPolicyError::DuplicateName`] or [`AddPolicyError::InvalidName`]), with
/// the policy handed back.
pub type AddError<C, T, E> = AddPolicyError<C, T, E, Predicate<C, E>>;

/// Ordered, named policies over a context `C`, each giving a configuration `T`, as many as you
/// add: the growable form of the core's [`PolicyEngine`](stormguard_core::policy::PolicyEngine), with
/// exactly its semantics. Evaluation runs in insertion order; the first policy whose predicate
/// matches gives its configuration; every evaluation (matched, not matched, or failed) is
/// recorded in the trail; a predicate that fails (`Err(e)`) is recorded as
/// [`PolicyVerdict::Failed`] and evaluation goes on.
/// Names are unique, so trail entries tell policies apart.
///
/// Predicates are boxed closures (`Fn(&C) -> Result<bool, E> + Send + Sync`), so they may
/// capture what a configuration file gave. The engine is `Send + Sync` when `T` is, and
/// evaluation takes `&self`: share it in an `Arc`, and to change a shared engine build the new
/// one and swap it in (e.g. with `arc_swap`).
///
/// ```
/// use stormguard_std::engine::PolicyVerdict;
/// use stormguard_std::PolicyEngine;
///
/// struct Message { topic: String, bytes: usize }
///
/// #[derive(Debug, PartialEq)]
/// struct Route { queue: &'static str }
///
/// let mut engine: PolicyEngine<Message, Route, String> = PolicyEngine::new();
/// let limit = 1024; // e.g. from a configuration file: captured
/// engine.add("large", move |m: &Message| Ok(m.bytes > limit), Route { queue: "bulk" })?;
/// engine.add(
///     "orders",
///     |m: &Message| match m.topic.split_once('.') {
///         Some((head, _)) => Ok(head == "orders"),
///         None => Err(format!("topic {:?} has no dot", m.topic)),
///     },
///     Route { queue: "orders" },
/// )?;
/// engine.add("default", |_: &Message| Ok(true), Route { queue: "main" })?;
///
/// let d = engine.evaluate(&Message { topic: "orders.created".into(), bytes: 10 });
/// assert_eq!(d.config(), Some(&Route { queue: "orders" }));
/// assert_eq!(d.trail.to_string(), "large: not matched, orders: matched");
///
/// // A predicate that cannot decide is recorded with its error, and evaluation goes on.
/// let d = engine.evaluate(&Message { topic: "heartbeat".into(), bytes: 10 });
/// assert_eq!(d.policy().map(|n| n.as_str()), Some("default"));
/// assert!(matches!(d.trail.entries()[1].verdict, PolicyVerdict::Failed(_)));
/// # Ok::<(), stormguard_std::engine::AddError<Message, Route, String>>(())
/// ```
pub struct PolicyEngine<C, T, E> {
    policies: Vec<EnginePolicy<C, T, E>>,
}

impl<C, T, E> PolicyEngine<C, T, E> {
    /// An engine with no policies.
    #[must_use]
    pub const fn new() -> Self {
        PolicyEngine {
            policies: Vec::new(),
        }
    }

    /// The most policies [`PolicyEngine::with_capacity`] makes room for up front: 2^16.
    ///
    /// Every decision evaluates the policies in order, so an engine of tens of thousands is
    /// already slow to consult; room for more is a mistake (a size from the wrong field, say),
    /// refused rather than a reservation that aborts the process. More policies may still be
    /// added one by one.
    pub const MAX_RESERVED: usize = 1 << 16;

    /// An engine with room for `n` policies before it reallocates.
    ///
    /// # Errors
    /// A [`SettingsError`] on [`Field::Capacity`] when `n` is above
    /// [`MAX_RESERVED`](PolicyEngine::MAX_RESERVED).
    ///
    /// ```
    /// use stormguard_std::stormguard_core::{Bound, Field};
    /// use stormguard_std::PolicyEngine;
    /// let e = PolicyEngine::<(), u8, ()>::with_capacity(1 << 40).unwrap_err();
    /// assert_eq!((e.field, e.bound), (Field::Capacity, Bound::AtMost(1 << 16)));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn with_capacity(n: usize) -> Result<Self, SettingsError> {
        if n > Self::MAX_RESERVED {
            return Err(SettingsError {
                field: Field::Capacity,
                bound: Bound::AtMost(Self::MAX_RESERVED as u64),
            });
        }
        Ok(PolicyEngine {
            policies: Vec::with_capacity(n),
        })
    }

    /// Adds a policy after the ones already there: it is evaluated after them. Refused, with
    /// the policy handed back, when its name is blank or holds a control character, or when one
    /// of the same name is there already.
    ///
    /// ```
    /// use stormguard_std::PolicyEngine;
    /// let mut engine: PolicyEngine<(), u8, ()> = PolicyEngine::new();
    /// engine.add("only", |_: &()| Ok(true), 1)?;
    /// let err = engine.add("only", |_: &()| Ok(true), 2).unwrap_err();
    /// assert_eq!(err.to_string(), "policy `only` not added: the name is taken");
    /// assert_eq!(*err.into_policy().config(), 2);
    /// # Ok::<(), stormguard_std::engine::AddError<(), u8, ()>>(())
    /// ```
    pub fn add<F>(
        &mut self,
        name: impl Into<Name>,
        predicate: F,
        config: T,
    ) -> Result<(), AddError<C, T, E>>
    where
        F: Fn(&C) -> Result<bool, E> + Send + Sync + 'static,
    {
        self.push(Rule::new(name, Box::new(predicate), config))
    }

    /// Adds a policy built beforehand; see [`PolicyEngine::add`].
    pub fn push(&mut self, policy: EnginePolicy<C, T, E>) -> Result<(), AddError<C, T, E>> {
        if let Err(e) = policy.name().check() {
            return Err(AddPolicyError::InvalidName(e, policy));
        }
        if self.get(policy.name().as_str()).is_some() {
            return Err(AddPolicyError::DuplicateName(policy));
        }
        self.policies.push(policy);
        Ok(())
    }

    /// The policy called `name`, if any.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&EnginePolicy<C, T, E>> {
        self.policies.iter().find(|p| *p.name() == name)
    }

    /// Removes the policy called `name`, keeping the others in order.
    pub fn remove(&mut self, name: &str) -> Option<EnginePolicy<C, T, E>> {
        let at = self.policies.iter().position(|p| *p.name() == name)?;
        Some(self.policies.remove(at))
    }

    /// Removes every policy.
    pub fn clear(&mut self) {
        self.policies.clear();
    }

    /// The policies, in evaluation order.
    #[must_use]
    pub fn policies(&self) -> &[EnginePolicy<C, T, E>] {
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
}

impl<C, T, E: Clone> PolicyEngine<C, T, E> {
    /// Evaluates the policies in order against `context`: the first match (or none) and the
    /// trail of every evaluation that ran (policies after the first match are not evaluated).
    ///
    /// A predicate's error is cloned out of the core's fixed trail into the growable one, so
    /// `E` is `Clone` (a `String`, an `Arc`, a small enum).
    pub fn evaluate(&self, context: &C) -> Decision<'_, T, E> {
        let mut trail = Trail::new();
        let matched = self.evaluate_into(context, &mut trail);
        Decision { matched, trail }
    }

    /// Like [`PolicyEngine::evaluate`], appending the evaluations to `trail` (which may hold
    /// those of another engine the same context went through).
    ///
    /// ```
    /// use stormguard_std::PolicyEngine;
    /// use stormguard_std::engine::Trail;
    /// let mut tenants: PolicyEngine<u32, &str, ()> = PolicyEngine::new();
    /// tenants.add("vip", |t: &u32| Ok(*t == 1), "fast")?;
    /// let mut sizes: PolicyEngine<u32, &str, ()> = PolicyEngine::new();
    /// sizes.add("any", |_: &u32| Ok(true), "normal")?;
    /// let mut trail = Trail::new();
    /// let m = tenants.evaluate_into(&7, &mut trail).or(sizes.evaluate_into(&7, &mut trail));
    /// assert_eq!(m.map(|m| *m.config), Some("normal"));
    /// assert_eq!(trail.to_string(), "vip: not matched, any: matched");
    /// # Ok::<(), stormguard_std::engine::AddError<u32, &str, ()>>(())
    /// ```
    pub fn evaluate_into<'a>(
        &'a self,
        context: &C,
        trail: &mut Trail<'a, E>,
    ) -> Option<PolicyMatch<'a, T>> {
        let mut chunk_trail = DecisionTrail::<'a, E, CHUNK>::new();
        for (n, chunk) in self.policies.chunks(CHUNK).enumerate() {
            chunk_trail.clear();
            // The core's rule: in order, every evaluation recorded, failures recorded and
            // passed over, the first match returned and nothing after it evaluated.
            let matched = Rule::first_match(chunk, context, &mut chunk_trail);
            trail.entries.extend(chunk_trail.iter().cloned());
            if let Some(m) = matched {
                return Some(PolicyMatch {
                    position: m.position.saturating_add(n.saturating_mul(CHUNK)),
                    ..m
                });
            }
        }
        None
    }
}

impl<C, T, E> Default for PolicyEngine<C, T, E> {
    fn default() -> Self {
        PolicyEngine::new()
    }
}

impl<C, T: fmt::Debug, E> fmt::Debug for PolicyEngine<C, T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("policies", &self.policies.as_slice())
            .finish()
    }
}
