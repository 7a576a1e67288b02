//! The bulkhead: a limit on calls in flight to one dependency, with an optional bounded wait for
//! a slot; its refusal is guarded like any other. See [`Bulkhead`] and [`SharedBulkhead`]; a
//! call takes a slot per attempt through its [`Parts`](crate::Parts).

use core::fmt;

use crate::cell::{const_unless_loom, field, put, sealed, word, Atomic, Local, Storage, Word};
use crate::error::{Bound, Field, RefusalReason, Refused, SettingsError};
use crate::name::Name;
use crate::part::BulkheadSlots;
use crate::time::{Duration, Instant};

/// The settings of a bulkhead, its name included. Built with [`BulkheadSettings::builder`],
/// validated by [`BulkheadSettingsBuilder::build`], immutable after.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | max in flight | 25 | calls admitted at once; at least 1 |
/// | bounded wait | none | up to `max_queue` callers wait, each at most `max_wait`, for a slot |
///
/// 25 in flight is resilience4j's default: enough for a service's ordinary concurrency to one
/// dependency, few enough that a dependency gone slow cannot hold every worker. No waiting by
/// default: a full bulkhead is news the caller should have at once.
///
/// ```
/// use stormguard_core::{limits::BulkheadSettings, Duration};
/// const DB: BulkheadSettings = match BulkheadSettings::builder("db")
///     .max_in_flight(8)
///     .bounded_wait(16, Duration::from_millis(250))
///     .build()
/// {
///     Ok(s) => s,
///     Err(_) => panic!("invalid bulkhead settings"),
/// };
/// assert_eq!(DB.max_in_flight(), 8);
/// assert_eq!(DB.max_queue(), 16);
/// assert_eq!(DB.to_string(), "8 in flight, up to 16 waiting at most 250ms");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BulkheadSettings {
    name: Name,
    max_in_flight: u32,
    max_queue: u32,
    max_wait: Duration,
}

/// Builds a [`BulkheadSettings`]; every method is `const`.
///
/// ```
/// use stormguard_core::{limits::BulkheadSettings, Duration, Field};
/// let err = BulkheadSettings::builder("db").max_in_flight(0).build().unwrap_err();
/// assert_eq!(err.field, Field::MaxInFlight);
/// let s = BulkheadSettings::builder("db").bounded_wait(4, Duration::from_millis(50)).build()?;
/// assert_eq!(s.max_queue(), 4);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BulkheadSettingsBuilder {
    settings: BulkheadSettings,
}

impl BulkheadSettings {
    /// The default limit on calls in flight.
    pub const DEFAULT_MAX_IN_FLIGHT: u32 = 25;

    /// A builder holding the defaults (25 in flight, no waiting), for a bulkhead called `name`.
    pub const fn builder(name: &'static str) -> BulkheadSettingsBuilder {
        BulkheadSettings::builder_named(Name::new(name))
    }

    /// A builder holding the defaults, for a bulkhead whose name came from elsewhere.
    pub const fn builder_named(name: Name) -> BulkheadSettingsBuilder {
        BulkheadSettingsBuilder {
            settings: BulkheadSettings {
                name,
                max_in_flight: BulkheadSettings::DEFAULT_MAX_IN_FLIGHT,
                max_queue: 0,
                max_wait: Duration::ZERO,
            },
        }
    }

    /// The bulkhead's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.name
    }

    /// Calls admitted at once.
    #[must_use]
    pub const fn max_in_flight(&self) -> u32 {
        self.max_in_flight
    }

    /// Callers that may wait for a slot at once (0: none wait).
    #[must_use]
    pub const fn max_queue(&self) -> u32 {
        self.max_queue
    }

    /// The longest a caller waits for a slot (zero: none wait).
    #[must_use]
    pub const fn max_wait(&self) -> Duration {
        self.max_wait
    }
}

impl BulkheadSettingsBuilder {
    /// Renames the bulkhead.
    pub const fn name(mut self, name: Name) -> Self {
        self.settings.name = name;
        self
    }

    /// Calls admitted at once (default 25; at least 1).
    pub const fn max_in_flight(mut self, n: u32) -> Self {
        self.settings.max_in_flight = n;
        self
    }

    /// Lets up to `max_queue` callers wait for a slot, each for at most `max_wait` (which must
    /// not be zero). A `max_queue` of 0 is [`no_wait`](BulkheadSettingsBuilder::no_wait).
    pub const fn bounded_wait(mut self, max_queue: u32, max_wait: Duration) -> Self {
        self.settings.max_queue = max_queue;
        self.settings.max_wait = if max_queue == 0 {
            Duration::ZERO
        } else {
            max_wait
        };
        self
    }

    /// No caller waits: a full bulkhead refuses at once (the default).
    pub const fn no_wait(mut self) -> Self {
        self.settings.max_queue = 0;
        self.settings.max_wait = Duration::ZERO;
        self
    }

    /// Checks every bound and returns the settings, or the first setting at fault.
    pub const fn build(self) -> Result<BulkheadSettings, SettingsError> {
        if let Err(e) = SettingsError::check_name(&self.settings.name) {
            return Err(e);
        }
        if self.settings.max_in_flight == 0 {
            return Err(SettingsError::new(Field::MaxInFlight, Bound::AtLeast(1)));
        }
        if self.settings.max_queue > 0 && self.settings.max_wait.is_zero() {
            return Err(SettingsError::new(
                Field::MaxWait,
                Bound::AtLeastDuration(Duration::from_nanos(1)),
            ));
        }
        Ok(self.settings)
    }
}

impl fmt::Display for BulkheadSettings {
    /// E.g. `25 in flight, no waiting` or `8 in flight, up to 16 waiting at most 250ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in flight, ", self.max_in_flight)?;
        if self.max_queue == 0 {
            f.write_str("no waiting")
        } else {
            write!(
                f,
                "up to {} waiting at most {}",
                self.max_queue, self.max_wait
            )
        }
    }
}

/// One call in flight: hand it back to [`Bulkhead::leave`] when the call ends (however it ends).
/// Not `Clone`: one permit, one slot.
///
/// ```
/// use stormguard_core::{limits::Bulkhead, Duration, Instant};
/// let mut b = Bulkhead::of(1, "db")?;
/// let permit = b.try_enter(Instant::from_secs(1)).unwrap();
/// assert_eq!(permit.held_for(Instant::from_secs(3)), Duration::from_secs(2));
/// b.leave(permit);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[must_use = "a permit holds a slot until it is handed back with `leave`"]
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BulkheadPermit {
    pub(crate) entered: Instant,
}

impl BulkheadPermit {
    /// When the call was admitted.
    #[must_use]
    pub const fn entered(&self) -> Instant {
        self.entered
    }

    /// How long the slot has been held, at `now`.
    #[must_use]
    pub const fn held_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.entered)
    }
}

/// A place in the bulkhead's queue: its holder may wait for a slot until
/// [`wait_until`](BulkheadTicket::wait_until), then must give the ticket to
/// [`Bulkhead::on_slot_free`] (or [`Bulkhead::abandon`] it). Not `Clone`: one ticket, one place.
///
/// ```
/// use stormguard_core::{limits::Bulkhead, limits::BulkheadEntry, limits::BulkheadSettings, Duration, Instant};
/// let mut b = Bulkhead::new(BulkheadSettings::builder("db").max_in_flight(1)
///     .bounded_wait(1, Duration::from_secs(1)).build()?);
/// let now = Instant::from_secs(5);
/// let permit = b.try_enter(now).unwrap();
/// let Ok(BulkheadEntry::Queued(ticket)) = b.try_enter_or_queue(now, Duration::MAX) else { panic!() };
/// assert_eq!(ticket.wait_until(), now + Duration::from_secs(1));
/// b.abandon(ticket); // the caller gave up
/// b.leave(permit);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[must_use = "a ticket holds a place in the queue until it is admitted, refused or abandoned"]
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BulkheadTicket {
    queued: Instant,
    until: Instant,
}

impl BulkheadTicket {
    /// When the wait began.
    #[must_use]
    pub const fn queued_at(&self) -> Instant {
        self.queued
    }

    /// When the wait ends: at this instant, [`Bulkhead::on_slot_free`] admits the holder if a slot
    /// is free and refuses it otherwise. An adapter sleeps until woken or until then.
    #[must_use]
    pub const fn wait_until(&self) -> Instant {
        self.until
    }
}

/// The answer of [`Bulkhead::try_enter_or_queue`] and [`Bulkhead::on_slot_free`] when not a
/// refusal.
///
/// ```
/// use stormguard_core::{limits::Bulkhead, limits::BulkheadEntry, Duration, Instant};
/// let mut b = Bulkhead::of(1, "db")?;
/// match b.try_enter_or_queue(Instant::ZERO, Duration::MAX) {
///     Ok(BulkheadEntry::Entered(permit)) => { b.leave(permit); }
///     Ok(BulkheadEntry::Queued(ticket)) => b.abandon(ticket),
///     Err(refused) => panic!("{refused}"),
/// }
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[must_use]
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BulkheadEntry {
    /// Admitted: make the call, then hand the permit back.
    Entered(BulkheadPermit),
    /// Waiting: sleep until woken or until [`BulkheadTicket::wait_until`], then call
    /// [`Bulkhead::on_slot_free`] with the ticket.
    Queued(BulkheadTicket),
}

/// How full a bulkhead is at one moment, for health endpoints and metrics.
///
/// ```
/// use stormguard_core::{limits::Bulkhead, Instant};
/// let mut b = Bulkhead::of(4, "db")?;
/// let permit = b.try_enter(Instant::ZERO).unwrap();
/// let snap = b.snapshot();
/// assert_eq!((snap.in_flight, snap.max_in_flight, snap.queued), (1, 4, 0));
/// # b.leave(permit);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BulkheadSnapshot {
    /// The bulkhead's name.
    pub name: Name,
    /// Calls in flight.
    pub in_flight: u32,
    /// Callers waiting for a slot.
    pub queued: u32,
    /// The limit on calls in flight.
    pub max_in_flight: u32,
    /// The limit on callers waiting.
    pub max_queue: u32,
}

/// The state word: calls in flight and callers waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counts {
    in_flight: u32,
    queued: u32,
}

impl Counts {
    fn unpack(word: u64) -> Counts {
        Counts {
            in_flight: u32::try_from(field(word, 0, 32)).unwrap_or(u32::MAX),
            queued: u32::try_from(field(word, 32, 32)).unwrap_or(u32::MAX),
        }
    }

    const fn pack(self) -> u64 {
        put(self.in_flight as u64, 0, 32) | put(self.queued as u64, 32, 32)
    }

    /// One more call in flight, if there is room.
    fn enter(self, s: &BulkheadSettings) -> Option<Counts> {
        (self.in_flight < s.max_in_flight).then(|| Counts {
            in_flight: self.in_flight.saturating_add(1),
            queued: self.queued,
        })
    }

    /// One more caller waiting, if there is room.
    fn queue(self, s: &BulkheadSettings) -> Option<Counts> {
        (self.queued < s.max_queue).then(|| Counts {
            in_flight: self.in_flight,
            queued: self.queued.saturating_add(1),
        })
    }

    /// A waiting caller takes a free slot, if there is one.
    fn promote(self, s: &BulkheadSettings) -> Option<Counts> {
        self.enter(s).map(Counts::dequeue)
    }

    const fn leave(self) -> Counts {
        Counts {
            in_flight: self.in_flight.saturating_sub(1),
            queued: self.queued,
        }
    }

    const fn dequeue(self) -> Counts {
        Counts {
            in_flight: self.in_flight,
            queued: self.queued.saturating_sub(1),
        }
    }
}

const FULL: Refused = Refused {
    reason: RefusalReason::BulkheadFull,
    retry_after: Duration::ZERO,
};

/// The bulkhead over some storage: a `Cell` word or an atomic one, the same rules for both.
#[derive(Debug)]
pub(crate) struct BulkheadCore<W> {
    settings: BulkheadSettings,
    word: W,
}

impl<W: Word> BulkheadCore<W> {
    const_unless_loom! {
        pub(crate) fn new(settings: BulkheadSettings) -> BulkheadCore<W> {
            BulkheadCore { settings, word: word!(W) }
        }
    }

    fn counts(&self) -> Counts {
        Counts::unpack(self.word.get())
    }

    /// Runs `f` in a load / step / compare-exchange loop; `f` returns the answer and the new
    /// counts (`None`: leave the word as it is).
    fn step<R>(&self, mut f: impl FnMut(Counts) -> (R, Option<Counts>)) -> R {
        let mut answer = None;
        self.word.update(|w| {
            let before = Counts::unpack(w);
            let (r, next) = f(before);
            answer = Some(r);
            next.map_or(w, Counts::pack)
        });
        // `update` runs `f` at least once.
        match answer {
            Some(r) => r,
            None => f(self.counts()).0,
        }
    }

    fn try_enter(&self, now: Instant) -> Result<BulkheadPermit, Refused> {
        let s = &self.settings;
        self.step(|c| match c.enter(s) {
            Some(next) => (Ok(BulkheadPermit { entered: now }), Some(next)),
            None => (Err(FULL), None),
        })
    }

    fn try_enter_or_queue(
        &self,
        now: Instant,
        max_wait: Duration,
    ) -> Result<BulkheadEntry, Refused> {
        let s = &self.settings;
        let wait = s.max_wait.min(max_wait);
        self.step(|c| {
            if let Some(next) = c.enter(s) {
                return (
                    Ok(BulkheadEntry::Entered(BulkheadPermit { entered: now })),
                    Some(next),
                );
            }
            match c.queue(s).filter(|_| !wait.is_zero()) {
                Some(next) => (
                    Ok(BulkheadEntry::Queued(BulkheadTicket {
                        queued: now,
                        until: now.saturating_add(wait),
                    })),
                    Some(next),
                ),
                None => (Err(FULL), None),
            }
        })
    }

    fn on_slot_free(&self, now: Instant, ticket: BulkheadTicket) -> Result<BulkheadEntry, Refused> {
        let s = &self.settings;
        let expired = now >= ticket.until;
        let admitted = self.step(|c| match c.promote(s) {
            Some(next) => (Some(true), Some(next)),
            None if expired => (Some(false), Some(c.dequeue())),
            None => (None, None),
        });
        match admitted {
            Some(true) => Ok(BulkheadEntry::Entered(BulkheadPermit { entered: now })),
            Some(false) => Err(FULL),
            None => Ok(BulkheadEntry::Queued(ticket)),
        }
    }

    fn abandon(&self, ticket: BulkheadTicket) {
        let BulkheadTicket { .. } = ticket;
        self.word.update(|w| Counts::unpack(w).dequeue().pack());
    }

    fn leave(&self, permit: BulkheadPermit) -> bool {
        let BulkheadPermit { .. } = permit;
        let (old, _) = self.word.update(|w| Counts::unpack(w).leave().pack());
        Counts::unpack(old).queued > 0
    }

    fn check(&self) -> Result<(), Refused> {
        self.counts().enter(&self.settings).map(|_| ()).ok_or(FULL)
    }

    fn snapshot(&self) -> BulkheadSnapshot {
        let c = self.counts();
        BulkheadSnapshot {
            name: self.settings.name,
            in_flight: c.in_flight,
            queued: c.queued,
            max_in_flight: self.settings.max_in_flight,
            max_queue: self.settings.max_queue,
        }
    }
}

/// A bulkhead: at most `max_in_flight` calls at once, its state in a `Cell` ([`Bulkhead`], for
/// one thread: `Send`, not `Sync`) or an atomic ([`SharedBulkhead`], lock-free, usable in a
/// `static`); one set of methods and one set of rules for both (see [`Storage`]).
///
/// Call order: [`try_enter`](Bulkhead::try_enter) (or
/// [`try_enter_or_queue`](Bulkhead::try_enter_or_queue) for a bounded wait) before the call;
/// [`leave`](Bulkhead::leave) with the permit when it ends, whatever the outcome, cancellation
/// included — a permit never handed back holds its slot for good. A waiter gives its ticket to
/// [`on_slot_free`](Bulkhead::on_slot_free) when woken or when its wait is over, or to
/// [`abandon`](Bulkhead::abandon) when it gives up. Reading changes nothing.
///
/// # Sans-IO waiting
/// The core keeps two counts — calls in flight and callers waiting — and decides; the adapters
/// wait. [`Bulkhead::try_enter`] admits or refuses at once. [`Bulkhead::try_enter_or_queue`]
/// admits, or (when the bulkhead is full, a bounded wait is configured and the queue has room)
/// hands out a [`BulkheadTicket`] that says how long its holder may wait. The holder sleeps until
/// woken or until [`BulkheadTicket::wait_until`], then calls [`Bulkhead::on_slot_free`], which
/// admits it, hands the ticket back (still waiting: another caller took the slot), or, once the
/// wait is over, refuses it and takes it off the queue. A waiter that gives up calls
/// [`Bulkhead::abandon`]. [`Bulkhead::leave`] returns `true` when callers are waiting: wake one.
///
/// Waiting is not first-come-first-served in the core: a caller arriving while a slot is free
/// takes it even if others are waiting for a wake-up (as `SemaphoreSlim` allows). The limit is
/// never exceeded either way; an adapter that wants strict order wakes waiters in order.
///
/// # `retry_after`
/// A full bulkhead refuses with `retry_after` [`Duration::ZERO`]: a slot frees when some call in
/// flight ends, which the core cannot foresee (it does not time calls), so "any moment" is the
/// honest answer. The guarded pause the call driver adds to every refusal is what keeps a caller
/// that retries at once from spinning.
///
/// # Shape
/// The state is one word: calls in flight in the low 32 bits, callers waiting in the high 32.
/// Every rule is a pure step on that word, run through one word abstraction: in a `Cell`
/// for [`Bulkhead`] (one thread) and in an atomic for [`SharedBulkhead`] (lock-free, usable in a
/// `static`), so no rule is written twice. A call's [`Parts`](crate::Parts) take a slot for
/// every attempt.
///
/// ```
/// use stormguard_core::{limits::Bulkhead, Instant, RefusalReason};
///
/// let mut db = Bulkhead::of(2, "db")?;
/// let now = Instant::from_secs(1);
/// let a = db.try_enter(now)?;
/// let b = db.try_enter(now)?;
/// let full = db.try_enter(now).unwrap_err();
/// assert_eq!(full.reason, RefusalReason::BulkheadFull);
/// db.leave(a);
/// let c = db.try_enter(now)?;
/// assert_eq!(db.in_flight(), 2);
/// # db.leave(b); db.leave(c);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// With a bounded wait:
///
/// ```
/// use stormguard_core::{limits::Bulkhead, limits::BulkheadEntry, limits::BulkheadSettings, Duration, Instant};
///
/// let settings = BulkheadSettings::builder("radio")
///     .max_in_flight(1)
///     .bounded_wait(1, Duration::from_millis(200))
///     .build()?;
/// let mut radio = Bulkhead::new(settings);
/// let t0 = Instant::from_secs(1);
/// let BulkheadEntry::Entered(first) = radio.try_enter_or_queue(t0, Duration::MAX)? else { panic!() };
/// // Full: the next caller may wait 200 ms (or less, if its own deadline is nearer).
/// let BulkheadEntry::Queued(ticket) = radio.try_enter_or_queue(t0, Duration::MAX)? else { panic!() };
/// assert_eq!(ticket.wait_until(), t0 + Duration::from_millis(200));
/// // The queue holds one: a third caller is refused at once.
/// assert!(radio.try_enter_or_queue(t0, Duration::MAX).is_err());
/// // The first call ends: `true` says someone waits, so the adapter wakes it.
/// assert!(radio.leave(first));
/// let t1 = t0 + Duration::from_millis(50);
/// let BulkheadEntry::Entered(second) = radio.on_slot_free(t1, ticket)? else { panic!() };
/// assert!(!radio.leave(second));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct BulkheadIn<C: Storage = Local> {
    core: BulkheadCore<<C as sealed::Storage>::Word>,
}

/// A bulkhead for one thread (`Send`, not `Sync`): see [`BulkheadIn`].
pub type Bulkhead = BulkheadIn<Local>;

/// A bulkhead shared by many threads through `&self`, lock-free: one atomic word (calls in
/// flight, callers waiting) driven by the rules of [`Bulkhead`]. Every count is exact: there is
/// only one word, so a snapshot is consistent.
///
/// On a chip without 64-bit compare-and-swap, prefer a [`Bulkhead`] behind the embassy mutex
/// (see the crate docs on atomics).
///
/// ```
/// use stormguard_core::{limits::BulkheadSettings, Instant, limits::SharedBulkhead};
///
/// static DB: SharedBulkhead = SharedBulkhead::new(match BulkheadSettings::builder("db").max_in_flight(4).build() {
///     Ok(s) => s,
///     Err(_) => panic!(),
/// });
///
/// let now = Instant::from_secs(1);
/// {
///     let _slot = DB.try_enter_guarded(now)?;
///     assert_eq!(DB.in_flight(), 1);
/// } // dropped: the slot is free again
/// assert_eq!(DB.in_flight(), 0);
/// # Ok::<(), stormguard_core::Refused>(())
/// ```
pub type SharedBulkhead = BulkheadIn<Atomic>;

impl<C: Storage> BulkheadIn<C> {
    const_unless_loom! {
        /// An empty bulkhead with validated `settings`; usable in a `static`.
        #[must_use]
        pub fn new(settings: BulkheadSettings) -> Self {
            BulkheadIn { core: BulkheadCore::new(settings) }
        }
    }

    /// A bulkhead called `name` admitting `max_in_flight` calls at once, with no waiting.
    pub fn of(max_in_flight: u32, name: &'static str) -> Result<Self, SettingsError> {
        BulkheadSettings::builder(name)
            .max_in_flight(max_in_flight)
            .build()
            .map(Self::new)
    }

    /// Admits a call at `now`, or refuses with [`RefusalReason::BulkheadFull`] and a zero
    /// `retry_after` (see [`BulkheadIn`] on why zero). Never queues.
    pub fn try_enter(&self, now: Instant) -> Result<BulkheadPermit, Refused> {
        self.core.try_enter(now)
    }

    /// Admits a call at `now`, or queues it when the bulkhead is full and the queue has room, for
    /// at most the shorter of the configured wait and `max_wait` (the caller's remaining
    /// deadline; [`Duration::MAX`] for none). Refuses when the queue is full or there is no
    /// time to wait.
    pub fn try_enter_or_queue(
        &self,
        now: Instant,
        max_wait: Duration,
    ) -> Result<BulkheadEntry, Refused> {
        self.core.try_enter_or_queue(now, max_wait)
    }

    /// A waiter's turn, at `now` (woken, or its wait is over): admits it if a slot is free;
    /// otherwise hands the ticket back to wait on, or, once the wait is over, refuses it and
    /// takes it off the queue.
    pub fn on_slot_free(
        &self,
        now: Instant,
        ticket: BulkheadTicket,
    ) -> Result<BulkheadEntry, Refused> {
        self.core.on_slot_free(now, ticket)
    }

    /// A waiter gives up (its caller cancelled): takes it off the queue.
    pub fn abandon(&self, ticket: BulkheadTicket) {
        self.core.abandon(ticket);
    }

    /// A call ended: frees its slot. Returns `true` when callers are waiting: wake one.
    pub fn leave(&self, permit: BulkheadPermit) -> bool {
        self.core.leave(permit)
    }

    /// Would a call be admitted now? Changes nothing.
    pub fn check(&self) -> Result<(), Refused> {
        self.core.check()
    }

    /// Calls in flight.
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        self.core.counts().in_flight
    }

    /// Callers waiting for a slot.
    #[must_use]
    pub fn queued(&self) -> u32 {
        self.core.counts().queued
    }

    /// Counts and limits, read from one word (consistent), for health endpoints and metrics.
    #[must_use]
    pub fn snapshot(&self) -> BulkheadSnapshot {
        self.core.snapshot()
    }

    /// The settings the bulkhead was built with.
    #[must_use]
    pub const fn settings(&self) -> &BulkheadSettings {
        &self.core.settings
    }

    /// The bulkhead's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.core.settings.name
    }
}

impl SharedBulkhead {
    /// Like [`try_enter`](BulkheadIn::try_enter), returning a guard that leaves when dropped.
    pub fn try_enter_guarded(&self, now: Instant) -> Result<BulkheadGuard<'_>, Refused> {
        self.core.try_enter(now).map(|p| self.guard(p))
    }

    /// Wraps a permit of this bulkhead in a guard that leaves when dropped.
    pub fn guard(&self, permit: BulkheadPermit) -> BulkheadGuard<'_> {
        BulkheadGuard {
            bulkhead: self,
            permit: Some(permit),
        }
    }
}

/// A slot of a [`SharedBulkhead`] that is handed back when the guard is dropped, so a cancelled
/// call never keeps its slot.
///
/// Dropping cannot say whether callers are waiting; an adapter that queues either ends with
/// [`BulkheadGuard::leave`], or wakes a waiter when [`SharedBulkhead::queued`] is above zero
/// after the drop.
///
/// ```
/// use stormguard_core::{Instant, limits::SharedBulkhead, limits::BulkheadSettings};
/// let b = SharedBulkhead::new(BulkheadSettings::builder("db").max_in_flight(1).build()?);
/// let guard = b.try_enter_guarded(Instant::ZERO).unwrap();
/// assert!(b.try_enter(Instant::ZERO).is_err());
/// drop(guard); // e.g. the caller's future was cancelled
/// assert_eq!(b.in_flight(), 0);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[must_use = "dropping the guard frees the slot at once"]
#[derive(Debug)]
pub struct BulkheadGuard<'a> {
    bulkhead: &'a SharedBulkhead,
    permit: Option<BulkheadPermit>,
}

impl BulkheadGuard<'_> {
    /// When the call was admitted.
    #[must_use]
    pub fn entered(&self) -> Option<Instant> {
        self.permit.as_ref().map(BulkheadPermit::entered)
    }

    /// Frees the slot now; `true` when callers are waiting (wake one).
    pub fn leave(mut self) -> bool {
        self.permit.take().is_some_and(|p| self.bulkhead.leave(p))
    }

    /// Takes the permit out; the caller then owes the bulkhead a [`SharedBulkhead::leave`].
    pub fn into_permit(mut self) -> Option<BulkheadPermit> {
        self.permit.take()
    }
}

impl Drop for BulkheadGuard<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            let _ = self.bulkhead.leave(p);
        }
    }
}

/// The call driver's bulkhead: a slot per attempt.
impl<C: Storage> BulkheadSlots for BulkheadIn<C> {
    #[inline]
    fn try_enter(&self, now: Instant) -> Result<(), Refused> {
        self.core.try_enter(now).map(|BulkheadPermit { .. }| ())
    }
    #[inline]
    fn leave(&self) -> bool {
        self.core.leave(BulkheadPermit {
            entered: Instant::ZERO,
        })
    }
    fn check(&self) -> Result<(), Refused> {
        self.core.check()
    }
}

impl<C: Storage> fmt::Display for BulkheadIn<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bulkhead `{}`", self.name())
    }
}

#[cfg(feature = "defmt")]
impl<C: Storage> defmt::Format for BulkheadIn<C> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "Bulkhead({})", self.name());
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for BulkheadGuard<'_> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "BulkheadGuard({})", self.permit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_pack_into_one_word_and_back() {
        for c in [
            Counts {
                in_flight: 0,
                queued: 0,
            },
            Counts {
                in_flight: u32::MAX,
                queued: 1,
            },
            Counts {
                in_flight: 7,
                queued: u32::MAX,
            },
        ] {
            assert_eq!(Counts::unpack(c.pack()), c);
        }
        // A zeroed word (how both forms start) is an empty bulkhead.
        assert_eq!(
            Counts::unpack(0),
            Counts {
                in_flight: 0,
                queued: 0
            }
        );
    }

    #[test]
    fn the_single_threaded_and_shared_forms_agree() {
        let s = match BulkheadSettings::builder("x")
            .max_in_flight(2)
            .bounded_wait(1, Duration::from_secs(1))
            .build()
        {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        let a = Bulkhead::new(s);
        let b = SharedBulkhead::new(s);
        let t = Instant::from_secs(1);
        for _ in 0..4 {
            let x = a.try_enter_or_queue(t, Duration::MAX).is_ok();
            let y = b.try_enter_or_queue(t, Duration::MAX).is_ok();
            assert_eq!(x, y);
        }
        assert_eq!(a.snapshot(), b.snapshot());
    }
}
