//! The discrete-event engine: every client drives its own calls through the core's call driver,
//! exactly like an adapter (poll, then attempt / wait / reject / done), on synthetic time.
//!
//! Events sit in a binary heap keyed by (time, sequence): nothing ticks, so an hour of fleet
//! traffic costs what its events cost. An attempt's timeout is a timer event racing the
//! dependency's answer; the guarded pause and backoff waits are served as events too.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use stormguard_core::{
    call::{Due, HedgedPair, Lane, PairNext},
    limits::Bulkhead,
    limits::RateLimiter,
    limits::SlidingWindowLimiter,
    Breaker, Budget, Call, CallSettings, Duration, Event, Finished, Instant, Outcome, Parts,
    Permit, RefusalReason, State, Step, TripReason,
};

use crate::limiters::{Limiter, Rule};
use crate::model::Dependency;
use crate::random::{derive, exponential_nanos, open01, LogNormal};
use crate::report::Report;
use crate::scenario::{Arrivals, Scenario, Strategy, DEPENDENCY};

const SECOND: u64 = 1_000_000_000;

/// How long after the last arrival the simulator waits for calls in flight to finish; calls
/// still unfinished then count as failed. Far longer than any deadline the built-ins use.
const DRAIN: u64 = 600 * SECOND;

/// How long after the trigger's end `availability_after_trigger` looks: a minute.
const AFTER_TRIGGER: u64 = 60 * SECOND;

/// What happens next.
#[derive(Clone, Copy, Debug)]
enum Ev {
    /// A client's next call arrives.
    Arrival(u32),
    /// A frame's backoff wait is over: poll it again.
    Poll(usize),
    /// A frame's guarded pause is over: the rejection is reported.
    Rejected(usize),
    /// The dependency (`dep`: 0 the scenario's, 1 the healthy one) answered an attempt.
    Served {
        frame: usize,
        attempt: u64,
        dep: usize,
        ok: bool,
        occupied: bool,
    },
    /// An attempt's timeout fired.
    Timeout { frame: usize, attempt: u64 },
    /// The timer of a frame's hedged pair fired (the `seq`th it armed).
    PairWake { frame: usize, seq: u64 },
    /// A lower layer's call, which was an upper layer's attempt, ended.
    ChildDone {
        frame: usize,
        attempt: u64,
        outcome: Outcome,
    },
}

struct Item {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    // Reversed: the heap pops the earliest (time, sequence) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

struct LayerState {
    settings: CallSettings,
    /// The settings of a call that is the upper layer's retry, when this layer holds its own
    /// retries for those (one attempt); `None` when it retries them as any call.
    nested: Option<CallSettings>,
    /// The layer's breaker, or none (its calls are then unguarded).
    breaker: Option<Box<Breaker>>,
    purse: Option<Budget>,
    limiter: Option<RateLimiter>,
    sliding: Option<SlidingWindowLimiter>,
    bulkhead: Option<Bulkhead>,
    /// The adaptive limiter: the core's, or a prototype rule's.
    adaptive: Option<Limiter>,
    /// Whether this breaker has opened before (for re-trips).
    opened: bool,
    /// Its first trip at or after the first impairment's start.
    first_trip: Option<u64>,
}

/// The parts of a layer's calls, as the core composes them: the GCRA limiter and the sliding
/// window (in the parts' two rate-limit places), the bulkhead, the adaptive limiter, then the
/// breaker (or none).
type LayerParts<'a> = Parts<
    &'a Breaker,
    &'a Budget,
    &'a SlidingWindowLimiter,
    &'a RateLimiter,
    &'a Bulkhead,
    &'a Limiter,
>;

impl LayerState {
    /// What the layer's call uses, for one poll or completion.
    fn parts(&self) -> LayerParts<'_> {
        Parts {
            name: Some(DEPENDENCY),
            breaker: self.breaker.as_deref(),
            budget: self.purse.as_ref(),
            limiter: self.sliding.as_ref(),
            quota: self.limiter.as_ref(),
            bulkhead: self.bulkhead.as_ref(),
            adaptive: self.adaptive.as_ref(),
            saturation: None,
        }
    }
}

struct Client {
    /// The strategy's layers for each dependency the client calls (`stacks[0]` for the
    /// scenario's, `stacks[1]` for the healthy one, if any): objects of their own for each.
    stacks: Vec<Vec<LayerState>>,
    /// Calls in progress, from their start to their end (the caller's pool holds them).
    busy: u32,
    arrivals: fastrand::Rng,
    /// Bursty arrivals: whether the client is in a burst, and until when (ns).
    bursting: bool,
    phase_until: u64,
}

/// One call in progress, at one layer.
struct Frame {
    client: u32,
    /// Which dependency the call is for (0: the scenario's, 1: the healthy one).
    dep: usize,
    layer: usize,
    call: Call,
    /// The upper layer's frame and attempt this call is, if any.
    parent: Option<(usize, u64)>,
    /// The hedged pair around the attempt in flight, when the core gave it a hedge delay
    /// (bottom layer only), with the hedge's attempt and permit once launched.
    pair: Option<HedgedPair>,
    hedge: Option<(u64, Permit)>,
    /// The pair's current wake-up (0: none). Unique across the run, like `attempt`: a frame's
    /// slot is reused by later calls, and a wake-up armed for an earlier call must not fire
    /// this one's pair.
    pair_wake: u64,
    begun: u64,
    permit: Option<Permit>,
    /// The attempt in flight (0: none). Unique across the run, so a stale event never matches.
    attempt: u64,
    /// When the attempt in flight was sent.
    attempt_began: u64,
    /// The attempt was admitted by a closed breaker.
    admitted_closed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Succeeded,
    Failed,
    Refused,
}

/// A trip, as the breaker's events reported it.
#[derive(Clone, Copy, Debug)]
struct Trip {
    at: u64,
    from: State,
    reason: Option<TripReason>,
    re_trip: bool,
}

#[derive(Default)]
struct Tally {
    calls_ps: Vec<u32>,
    attempts_ps: Vec<u32>,
    successes_ps: Vec<u32>,
    failures_ps: Vec<u32>,
    refusals_ps: Vec<u32>,
    saturated_ps: Vec<u32>,
    /// (start, succeeded) of every top-level call.
    log: Vec<(u64, bool)>,
    /// (sent, answered with a success before its caller gave up) of every attempt at the
    /// scenario's dependency whose outcome its caller took.
    attempt_log: Vec<(u64, bool)>,
    /// Calls to the healthy dependency begun within the fault window, and those that succeeded.
    healthy_window_calls: u64,
    healthy_window_ok: u64,
    /// Attempts the dependency took on and answered after their caller had stopped waiting.
    wasted: u64,
    saturated: u64,
    latencies: Vec<u64>,
    /// How long the dependency took over each attempt it took on, begun before the first
    /// impairment (its healthy latency) and within the fault window.
    served_before: Vec<u64>,
    served_in_window: Vec<u64>,
    succeeded: u64,
    failed: u64,
    refused: u64,
    attempts: u64,
    retries: u64,
    probes: u64,
    window_calls: u64,
    window_attempts: u64,
    trips: Vec<Trip>,
    closed_outcomes: u64,
    refused_by_breaker: u64,
    refused_by_budget: u64,
    refused_by_limits: u64,
    unprobed_while_open: u64,
    hedges: u64,
}

fn bump(v: &mut Vec<u32>, at: u64) {
    let i = usize::try_from(at / SECOND).unwrap_or(usize::MAX);
    if i >= v.len() {
        v.resize(i + 1, 0);
    }
    v[i] += 1;
}

struct Sim<'a> {
    scenario: &'a Scenario,
    /// The dependencies: the scenario's, then the healthy one, if any.
    deps: Vec<&'a Dependency>,
    curves: Vec<LogNormal>,
    end: u64,
    window: (u64, u64),
    first_impairment: Option<u64>,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Item>,
    frames: Vec<Option<Frame>>,
    free: Vec<usize>,
    clients: Vec<Client>,
    /// Attempts each dependency has in flight (those whose callers gave up included).
    in_flight: Vec<u32>,
    next_attempt: u64,
    /// The last pair wake-up number handed out.
    next_wake: u64,
    /// Each dependency's own random numbers.
    dep_rngs: Vec<fastrand::Rng>,
    tally: Tally,
}

/// Runs one strategy of a scenario with `seed`, and measures it.
#[must_use]
pub fn run(scenario: &Scenario, strategy: &Strategy, seed: u64) -> Report {
    let end = scenario.duration.as_nanos();
    let window = scenario
        .dependency
        .fault_window(scenario.duration)
        .map_or((0, end), |(a, b)| (a.as_nanos(), b.as_nanos()));
    let first_impairment = scenario
        .dependency
        .impairments
        .iter()
        .map(|i| i.start().as_nanos())
        .min();
    let deps: Vec<&Dependency> = std::iter::once(&scenario.dependency)
        .chain(scenario.healthy.as_ref().map(|h| &h.dependency))
        .collect();
    let clients = (0..scenario.clients)
        .map(|c| {
            let c64 = u64::from(c);
            Client {
                arrivals: fastrand::Rng::with_seed(derive(seed, c64, 0xA11)),
                bursting: false,
                phase_until: 0,
                busy: 0,
                stacks: (0..deps.len() as u64)
                    .map(|d| stack(strategy, seed, c64, d))
                    .collect(),
            }
        })
        .collect();
    let mut sim = Sim {
        scenario,
        curves: deps.iter().map(|d| d.curve()).collect(),
        in_flight: vec![0; deps.len()],
        // The scenario's dependency draws from the stream it always has; the healthy one from
        // its own.
        dep_rngs: (0..deps.len() as u64)
            .map(|d| fastrand::Rng::with_seed(derive(seed, u64::MAX - d, 0xDE9)))
            .collect(),
        deps,
        end,
        window,
        first_impairment,
        now: 0,
        seq: 0,
        heap: BinaryHeap::new(),
        frames: Vec::new(),
        free: Vec::new(),
        clients,
        next_attempt: 1,
        next_wake: 0,
        tally: Tally::default(),
    };
    sim.start();
    sim.run_events();
    sim.report(strategy, seed)
}

/// Client `c64`'s objects for the strategy's layers in front of dependency `d`, each seeded
/// from the run's seed. Dependency 0's seeds are those a one-dependency run has always used.
fn stack(strategy: &Strategy, seed: u64, c64: u64, d: u64) -> Vec<LayerState> {
    let tag = d * 0x1_0000;
    strategy
        .layers
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let k64 = k as u64 + tag;
            // The layer's settings with this client's own jitter seed (a seed
            // is never refused, so `build` cannot fail here).
            let settings = l
                .call
                .to_builder()
                .seed(derive(seed, c64, 0xCA11 + k64))
                .build()
                .unwrap_or(l.call);
            // One attempt, the rest as the layer's (cannot fail: `settings` is valid).
            let nested = (!l.retries_when_nested).then(|| {
                settings
                    .to_builder()
                    .max_attempts(1)
                    .build()
                    .unwrap_or(settings)
            });
            LayerState {
                settings,
                nested,
                breaker: l
                    .breaker
                    .map(|b| Box::new(Breaker::new(b).with_seed(derive(seed, c64, 0xB4EA + k64)))),
                purse: l.budget.map(Budget::new),
                limiter: l.limiter.map(RateLimiter::new),
                sliding: l.sliding.map(SlidingWindowLimiter::new),
                bulkhead: l.bulkhead.map(Bulkhead::new),
                adaptive: l
                    .limit_rule
                    .or(l.adaptive.map(Rule::Core))
                    .map(|r| r.limiter()),
                opened: false,
                first_trip: None,
            }
        })
        .collect()
}

impl Sim<'_> {
    fn at(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Item {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn start(&mut self) {
        for c in 0..self.scenario.clients {
            if let Arrivals::Bursty { share, .. } = self.scenario.arrivals {
                // Start in the stationary mix: in a burst with probability `share`, with the
                // phase's remaining length drawn afresh (the lengths are memoryless).
                let client = &mut self.clients[c as usize];
                client.bursting = open01(&mut client.arrivals) < share;
                self.next_phase(c, 0);
            }
            let first = match self.scenario.arrivals {
                // Polling clients start spread over the first second.
                Arrivals::Polling { .. } => {
                    Some(u64::from(c) * SECOND / u64::from(self.scenario.clients.max(1)))
                }
                _ => self.next_arrival(c, 0),
            };
            if let Some(first) = first.filter(|&t| t < self.end) {
                self.at(first, Ev::Arrival(c));
            }
        }
    }

    /// An open-loop client's next arrival after `from`, or none (a polling client's next call
    /// follows its last one's end instead; bursts may outlast the run).
    fn next_arrival(&mut self, c: u32, from: u64) -> Option<u64> {
        match self.scenario.arrivals {
            Arrivals::Poisson { rate } => {
                let gap = exponential_nanos(&mut self.clients[c as usize].arrivals, 1e9 / rate);
                Some(from.saturating_add(gap as u64))
            }
            Arrivals::Bursty {
                rate, peak, share, ..
            } => {
                let calm = (rate * (1.0 - share * peak) / (1.0 - share)).max(0.0);
                let mut t = from;
                loop {
                    let client = &mut self.clients[c as usize];
                    let r = if client.bursting { rate * peak } else { calm };
                    if r > 0.0 {
                        let gap = exponential_nanos(&mut client.arrivals, 1e9 / r);
                        let next = t.saturating_add(gap as u64);
                        if next < client.phase_until {
                            return Some(next);
                        }
                    }
                    // The draw ran past the phase: the process is memoryless, so the next
                    // phase starts afresh at the boundary.
                    t = client.phase_until;
                    if t >= self.end {
                        return None;
                    }
                    client.bursting = !client.bursting;
                    self.next_phase(c, t);
                }
            }
            Arrivals::Polling { .. } => None,
        }
    }

    /// Draws how long a bursty client's current phase lasts from `t`.
    fn next_phase(&mut self, c: u32, t: u64) {
        if let Arrivals::Bursty { share, burst, .. } = self.scenario.arrivals {
            // A share near 0 or 1 makes a phase's mean huge (the cast saturates) or tiny (a phase
            // lasts at least 1 ns): never a loop without progress.
            let burst_ns = burst.as_nanos() as f64;
            let client = &mut self.clients[c as usize];
            let mean = if client.bursting {
                burst_ns
            } else {
                burst_ns * (1.0 - share) / share
            };
            let length = exponential_nanos(&mut client.arrivals, mean) as u64;
            client.phase_until = t.saturating_add(length.max(1));
        }
    }

    fn run_events(&mut self) {
        while let Some(item) = self.heap.pop() {
            if item.at > self.end.saturating_add(DRAIN) {
                break;
            }
            self.now = item.at;
            match item.ev {
                Ev::Arrival(c) => self.arrival(c),
                Ev::Poll(f) => self.drive(f),
                Ev::Rejected(f) => self.finish(f, End::Refused, None),
                Ev::Served {
                    frame,
                    attempt,
                    dep,
                    ok,
                    occupied,
                } => {
                    if occupied {
                        self.in_flight[dep] -= 1;
                        if !self.awaited(frame, attempt) {
                            self.tally.wasted += 1;
                        }
                    }
                    let outcome = if ok {
                        Outcome::Success
                    } else {
                        Outcome::Transient
                    };
                    self.answer(frame, attempt, outcome);
                }
                Ev::Timeout { frame, attempt } => self.answer(frame, attempt, Outcome::TimedOut),
                Ev::PairWake { frame, seq } => self.pair_wake(frame, seq),
                Ev::ChildDone {
                    frame,
                    attempt,
                    outcome,
                } => self.answer(frame, attempt, outcome),
            }
        }
        // Calls still unfinished after the drain count as failed.
        let stuck: Vec<u64> = self
            .frames
            .iter()
            .flatten()
            .filter(|f| f.parent.is_none())
            .map(|f| f.begun)
            .collect();
        for begun in stuck {
            self.tally.failed += 1;
            bump(&mut self.tally.failures_ps, begun);
            self.tally.log.push((begun, false));
            self.tally
                .latencies
                .push(self.end.saturating_add(DRAIN) - begun);
        }
    }

    /// Whether frame `f` still waits for the answer to `attempt` (as its attempt in flight or
    /// its hedge).
    fn awaited(&self, f: usize, attempt: u64) -> bool {
        self.frames
            .get(f)
            .and_then(Option::as_ref)
            .is_some_and(|frame| {
                frame.attempt == attempt
                    || frame.hedge.as_ref().is_some_and(|(id, _)| *id == attempt)
            })
    }

    fn arrival(&mut self, c: u32) {
        if self.now >= self.end {
            return;
        }
        if let Some(next) = self.next_arrival(c, self.now).filter(|&t| t < self.end) {
            self.at(next, Ev::Arrival(c));
        }
        let now = self.now;
        // Which dependency the call is for: drawn only when there are two, so a one-dependency
        // run's arrivals stay what they always were.
        let dep = match &self.scenario.healthy {
            Some(h) if open01(&mut self.clients[c as usize].arrivals) < h.share => 1,
            _ => 0,
        };
        bump(&mut self.tally.calls_ps, now);
        let in_window = now >= self.window.0 && now < self.window.1;
        if in_window {
            self.tally.window_calls += 1;
            if dep == 1 {
                self.tally.healthy_window_calls += 1;
            }
        }
        let client = &mut self.clients[c as usize];
        if self.scenario.pool.is_some_and(|p| client.busy >= p) {
            // The caller's own pool is full: the call fails at once, before any policy sees it.
            let t = &mut self.tally;
            t.saturated += 1;
            bump(&mut t.saturated_ps, now);
            t.log.push((now, false));
            t.latencies.push(0);
            return;
        }
        client.busy += 1;
        let f = self.spawn(c, dep, 0, None, false, None);
        self.drive(f);
    }

    /// A call at `layer`, for the upper layer's attempt `parent` (a retry when `retry`).
    fn spawn(
        &mut self,
        client: u32,
        dep: usize,
        layer: usize,
        parent: Option<(usize, u64)>,
        retry: bool,
        deadline: Option<Instant>,
    ) -> usize {
        let now = Instant::from_nanos(self.now);
        let ls = &self.clients[client as usize].stacks[dep][layer];
        let settings = match (&ls.nested, retry) {
            (Some(single), true) => single,
            _ => &ls.settings,
        };
        let mut call = Call::begin(settings, now);
        if let Some(d) = deadline {
            call = call.with_deadline(d);
        }
        let frame = Frame {
            client,
            dep,
            layer,
            call,
            parent,
            pair: None,
            hedge: None,
            pair_wake: 0,
            begun: self.now,
            permit: None,
            attempt: 0,
            attempt_began: 0,
            admitted_closed: false,
        };
        match self.free.pop() {
            Some(i) => {
                self.frames[i] = Some(frame);
                i
            }
            None => {
                self.frames.push(Some(frame));
                self.frames.len() - 1
            }
        }
    }

    /// Polls a frame's call and does what it says.
    fn drive(&mut self, f: usize) {
        let now = Instant::from_nanos(self.now);
        let (step, client, dep, layer, closed, open, attempts, deadline) = {
            let Sim {
                frames,
                clients,
                tally,
                first_impairment,
                ..
            } = self;
            let Some(frame) = frames[f].as_mut() else {
                return;
            };
            let ls = &mut clients[frame.client as usize].stacks[frame.dep][frame.layer];
            let state = ls.breaker.as_ref().map(|b| b.state(now));
            let closed = state == Some(State::Closed);
            let open = matches!(state, Some(State::Open | State::HalfOpen));
            let parts = ls.parts();
            let mut seen = Vec::new();
            let step = frame.call.poll(&parts, now, &mut |e| collect(e, &mut seen));
            record_trips(ls, tally, *first_impairment, now.as_nanos(), &seen);
            (
                step,
                frame.client,
                frame.dep,
                frame.layer,
                closed,
                open,
                frame.call.attempts(),
                frame.call.attempt_deadline(),
            )
        };
        match step {
            Step::Attempt(permit) => {
                let id = self.next_attempt;
                self.next_attempt += 1;
                if attempts > 1 {
                    self.tally.retries += 1;
                }
                let probe = permit.is_probe();
                if open && !probe {
                    self.tally.unprobed_while_open += 1;
                }
                if let Some(frame) = self.frames[f].as_mut() {
                    frame.permit = Some(permit);
                    frame.attempt = id;
                    frame.admitted_closed = closed;
                }
                if layer + 1 < self.clients[client as usize].stacks[dep].len() {
                    let child = self.spawn(
                        client,
                        dep,
                        layer + 1,
                        Some((f, id)),
                        attempts > 1,
                        deadline,
                    );
                    self.drive(child);
                } else if let Some(after) = self.hedge_delay(f, now) {
                    // The pair's timer watches the deadlines (and the hedge's launch).
                    if let Some(frame) = self.frames[f].as_mut() {
                        frame.pair = Some(HedgedPair::begin(&frame.call, now, Some(after)));
                    }
                    self.send(f, id, probe, None);
                    self.arm_pair(f);
                } else {
                    self.send(f, id, probe, deadline);
                }
            }
            Step::Wait(d) => {
                let at = self.now.saturating_add(d.as_nanos());
                self.at(at, Ev::Poll(f));
            }
            Step::Reject(r) => {
                match r.reason {
                    RefusalReason::BudgetExhausted => self.tally.refused_by_budget += 1,
                    RefusalReason::RateLimited
                    | RefusalReason::BulkheadFull
                    | RefusalReason::ConcurrencyLimited => {
                        self.tally.refused_by_limits += 1;
                    }
                    _ => self.tally.refused_by_breaker += 1,
                }
                let at = self.now.saturating_add(r.pause.as_nanos());
                self.at(at, Ev::Rejected(f));
            }
            Step::Done(fin) => {
                let end = match fin {
                    Finished::Succeeded => End::Succeeded,
                    Finished::Rejected(_) => End::Refused,
                    _ => End::Failed,
                };
                self.finish(f, end, Some(fin));
            }
        }
    }

    /// Sends an attempt to the dependency, racing its timeout.
    fn send(&mut self, f: usize, id: u64, probe: bool, deadline: Option<Instant>) {
        let now = self.now;
        let Some(dep) = self.frames[f].as_mut().map(|frame| {
            if frame.attempt == id {
                frame.attempt_began = now;
            }
            frame.dep
        }) else {
            return;
        };
        // Attempts at either dependency: each call makes its attempts at one of them.
        self.tally.attempts += 1;
        if probe {
            self.tally.probes += 1;
        }
        bump(&mut self.tally.attempts_ps, now);
        if now >= self.window.0 && now < self.window.1 {
            self.tally.window_attempts += 1;
        }
        let service = self.deps[dep].serve(
            &self.curves[dep],
            Duration::from_nanos(now),
            self.in_flight[dep],
            &mut self.dep_rngs[dep],
        );
        if service.occupies {
            self.in_flight[dep] += 1;
            let took = service.latency.as_nanos();
            if dep == 0 {
                if now < self.window.0 {
                    self.tally.served_before.push(took);
                } else if now < self.window.1 {
                    self.tally.served_in_window.push(took);
                }
            }
        }
        let done = now.saturating_add(service.latency.as_nanos());
        self.at(
            done,
            Ev::Served {
                frame: f,
                attempt: id,
                dep,
                ok: service.ok,
                occupied: service.occupies,
            },
        );
        if let Some(d) = deadline {
            if d.as_nanos() < done {
                self.at(
                    d.as_nanos(),
                    Ev::Timeout {
                        frame: f,
                        attempt: id,
                    },
                );
            }
        }
    }

    /// The attempt `attempt` of frame `f` ended with `outcome` (if it is still the one in flight).
    fn answer(&mut self, f: usize, attempt: u64, outcome: Outcome) {
        let now = Instant::from_nanos(self.now);
        {
            let Sim {
                frames,
                clients,
                tally,
                first_impairment,
                ..
            } = self;
            let Some(frame) = frames[f].as_mut() else {
                return;
            };
            if frame.pair.is_some() {
                let lane = if frame.attempt == attempt && attempt != 0 {
                    Lane::First
                } else if frame.hedge.as_ref().is_some_and(|(id, _)| *id == attempt) {
                    Lane::Hedge
                } else {
                    return;
                };
                return self.pair_answer(f, lane, outcome);
            }
            if frame.attempt != attempt {
                return;
            }
            frame.attempt = 0;
            let Some(permit) = frame.permit.take() else {
                return;
            };
            if frame.admitted_closed && outcome.is_counted() {
                tally.closed_outcomes += 1;
            }
            let stack = &mut clients[frame.client as usize].stacks[frame.dep];
            if frame.dep == 0 && frame.layer + 1 == stack.len() {
                tally
                    .attempt_log
                    .push((frame.attempt_began, outcome == Outcome::Success));
            }
            let ls = &mut stack[frame.layer];
            let parts = ls.parts();
            let mut seen = Vec::new();
            frame
                .call
                .complete(&parts, permit, now, outcome, &mut |e| collect(e, &mut seen));
            record_trips(ls, tally, *first_impairment, now.as_nanos(), &seen);
        }
        self.drive(f);
    }

    /// When the attempt frame `f` was just granted should be hedged, as the core says (only
    /// the bottom layer's attempts are hedged: a higher layer's attempt is a call).
    fn hedge_delay(&self, f: usize, now: Instant) -> Option<Duration> {
        let frame = self.frames[f].as_ref()?;
        let ls = &self.clients[frame.client as usize].stacks[frame.dep][frame.layer];
        frame.call.hedge_delay(&ls.parts(), now)
    }

    /// Arms the timer of frame `f`'s hedged pair for what it waits for next.
    fn arm_pair(&mut self, f: usize) {
        let Some(frame) = self.frames[f].as_mut() else {
            return;
        };
        self.next_wake += 1;
        let seq = self.next_wake;
        frame.pair_wake = seq;
        if let Some(at) = frame.pair.as_ref().and_then(HedgedPair::wake_at) {
            self.at(at.as_nanos().max(self.now), Ev::PairWake { frame: f, seq });
        }
    }

    /// The timer of frame `f`'s pair fired: launch the hedge, or time an attempt out.
    fn pair_wake(&mut self, f: usize, seq: u64) {
        let now = Instant::from_nanos(self.now);
        let due = match self.frames[f].as_mut() {
            Some(frame) if frame.pair_wake == seq => frame.pair.as_mut().and_then(HedgedPair::due),
            _ => return,
        };
        match due {
            Some(Due::Launch) => {
                let id = self.next_attempt;
                let launched = {
                    let Sim {
                        frames,
                        clients,
                        tally,
                        first_impairment,
                        ..
                    } = self;
                    let Some(frame) = frames[f].as_mut() else {
                        return;
                    };
                    let ls = &mut clients[frame.client as usize].stacks[frame.dep][frame.layer];
                    let parts = ls.parts();
                    let mut seen = Vec::new();
                    let granted = match frame.pair.as_mut() {
                        Some(pair) => pair
                            .launch(
                                &mut frame.call,
                                &parts,
                                now,
                                &mut |e| collect(e, &mut seen),
                                Some,
                            )
                            .map(|(permit, _)| permit),
                        None => None,
                    };
                    record_trips(ls, tally, *first_impairment, now.as_nanos(), &seen);
                    granted.map(|permit| frame.hedge = Some((id, permit)))
                };
                if launched.is_some() {
                    self.next_attempt += 1;
                    self.tally.retries += 1;
                    self.tally.hedges += 1;
                    self.send(f, id, false, None);
                }
                self.arm_pair(f);
            }
            Some(Due::Deadline(lane)) => self.pair_answer(f, lane, Outcome::TimedOut),
            None => self.arm_pair(f),
        }
    }

    /// The attempt in `lane` of frame `f`'s pair ended with `outcome`: the core's pair says
    /// whether the other runs on, or is dropped, or the call goes on.
    fn pair_answer(&mut self, f: usize, lane: Lane, outcome: Outcome) {
        let now = Instant::from_nanos(self.now);
        let next = {
            let Sim {
                frames,
                clients,
                tally,
                first_impairment,
                ..
            } = self;
            let Some(frame) = frames[f].as_mut() else {
                return;
            };
            if frame.dep == 0 {
                // A hedge's start is not kept: the pair's first attempt's stands for both.
                tally
                    .attempt_log
                    .push((frame.attempt_began, outcome == Outcome::Success));
            }
            let permit = match lane {
                Lane::First => {
                    frame.attempt = 0;
                    frame.permit.take()
                }
                Lane::Hedge => frame.hedge.take().map(|(_, p)| p),
            };
            if frame.admitted_closed && outcome.is_counted() {
                tally.closed_outcomes += 1;
            }
            let ls = &mut clients[frame.client as usize].stacks[frame.dep][frame.layer];
            let parts = ls.parts();
            let mut seen = Vec::new();
            let mut events = |e: Event<'_>| collect(e, &mut seen);
            let Some(pair) = frame.pair.as_mut() else {
                return;
            };
            let answered = outcome == Outcome::Success;
            let next = pair.finished(
                &mut frame.call,
                &parts,
                lane,
                permit,
                now,
                outcome,
                answered,
                &mut events,
            );
            if let PairNext::Drop(other) = next {
                // The other attempt is abandoned: the dependency still serves it (its answer
                // is ignored), and the breaker hears of it as cancelled.
                let permit = match other {
                    Lane::First => {
                        frame.attempt = 0;
                        frame.permit.take()
                    }
                    Lane::Hedge => frame.hedge.take().map(|(_, p)| p),
                };
                pair.abandon(&mut frame.call, &parts, other, permit, now, &mut events);
            }
            if next != PairNext::Wait {
                frame.pair = None;
            }
            record_trips(ls, tally, *first_impairment, now.as_nanos(), &seen);
            next
        };
        match next {
            PairNext::Wait => self.arm_pair(f),
            PairNext::Over | PairNext::Drop(_) => self.drive(f),
        }
    }

    /// A frame's call ended.
    fn finish(&mut self, f: usize, end: End, fin: Option<Finished>) {
        let Some(frame) = self.frames[f].take() else {
            return;
        };
        self.free.push(f);
        let now = self.now;
        if let Some((parent, attempt)) = frame.parent {
            // The upper layer sees this call as one attempt: a success, or a failure (a timeout
            // when its own attempt deadline has passed).
            let deadline_passed = self.frames[parent]
                .as_ref()
                .and_then(|p| p.call.attempt_deadline())
                .is_some_and(|d| d.as_nanos() <= now);
            let outcome = match (end, fin) {
                (End::Succeeded, _) => Outcome::Success,
                (_, Some(Finished::Cancelled)) => Outcome::Cancelled,
                _ if deadline_passed => Outcome::TimedOut,
                _ => Outcome::Transient,
            };
            self.at(
                now,
                Ev::ChildDone {
                    frame: parent,
                    attempt,
                    outcome,
                },
            );
            return;
        }
        let client = &mut self.clients[frame.client as usize];
        client.busy = client.busy.saturating_sub(1);
        let t = &mut self.tally;
        match end {
            End::Succeeded => {
                t.succeeded += 1;
                bump(&mut t.successes_ps, frame.begun);
                if frame.dep == 1 && frame.begun >= self.window.0 && frame.begun < self.window.1 {
                    t.healthy_window_ok += 1;
                }
            }
            End::Failed => {
                t.failed += 1;
                bump(&mut t.failures_ps, frame.begun);
            }
            End::Refused => {
                t.refused += 1;
                bump(&mut t.refusals_ps, frame.begun);
            }
        }
        t.log.push((frame.begun, end == End::Succeeded));
        t.latencies.push(now - frame.begun);
        if let Arrivals::Polling { think } = self.scenario.arrivals {
            let next = now.saturating_add(think.as_nanos());
            if next < self.end {
                self.at(next, Ev::Arrival(frame.client));
            }
        }
    }

    fn report(mut self, strategy: &Strategy, seed: u64) -> Report {
        let t = &mut self.tally;
        let calls = t.succeeded + t.failed + t.refused + t.saturated;
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let (p50, p99) = (
            percentile_ms(&mut t.latencies, 50).unwrap_or(0.0),
            percentile_ms(&mut t.latencies, 99).unwrap_or(0.0),
        );
        let served_p99_before = percentile_ms(&mut t.served_before, 99);
        let served_p99_in_window = percentile_ms(&mut t.served_in_window, 99);
        let amplification = t
            .calls_ps
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| f64::from(t.attempts_ps.get(i).copied().unwrap_or(0)) / f64::from(c))
            .fold(0.0_f64, f64::max);
        t.log.sort_unstable();
        let recover_from = self
            .scenario
            .dependency
            .answering_again()
            .map(|d| d.as_nanos());
        let time_to_recover =
            recover_from.and_then(|from| first_good_second(&t.log, from, self.end));
        t.attempt_log.sort_unstable();
        let dependency_recovered =
            recover_from.and_then(|from| first_good_second(&t.attempt_log, from, self.end));
        // The minute after the trigger: from the end of the last impairment, when every one
        // ends within the run.
        let trigger_end = self
            .scenario
            .dependency
            .impairments
            .iter()
            .map(|i| i.end().map(|e| e.as_nanos()))
            .try_fold(None, |last: Option<u64>, e| {
                e.map(|e| Some(last.map_or(e, |l| l.max(e))))
            })
            .flatten()
            .filter(|&e| e < self.end);
        let availability_after_trigger = trigger_end.map(|from| {
            let to = from.saturating_add(AFTER_TRIGGER).min(self.end);
            let begin = t.log.partition_point(|&(s, _)| s < from);
            let stop = t.log.partition_point(|&(s, _)| s < to);
            let after = &t.log[begin..stop];
            let ok = after.iter().filter(|(_, ok)| *ok).count();
            ratio(ok as u64, after.len() as u64)
        });
        let healthy_dependency_availability = self
            .scenario
            .healthy
            .as_ref()
            .map(|_| ratio(t.healthy_window_ok, t.healthy_window_calls));
        let window_s = (self.window.1 - self.window.0) as f64 / 1e9;
        let per_second = |n: u64| {
            if window_s > 0.0 {
                n as f64 / window_s
            } else {
                0.0
            }
        };
        let ms = |n: u64| n as f64 / 1e6;
        // The trips the figures below speak of are the scenario's dependency's breakers'.
        let breakers: Vec<&LayerState> = self
            .clients
            .iter()
            .flat_map(|c| c.stacks[0].iter())
            .filter(|l| l.breaker.is_some())
            .collect();
        let firsts: Vec<u64> = breakers.iter().filter_map(|l| l.first_trip).collect();
        let start = self.first_impairment;
        let time_to_trip = start.and_then(|s| firsts.iter().min().map(|&f| ms(f - s)));
        let time_to_trip_last = start.and_then(|s| {
            (!breakers.is_empty() && firsts.len() == breakers.len())
                .then(|| firsts.iter().max().map(|&f| ms(f - s)))
                .flatten()
        });
        let trip_window = strategy
            .layers
            .iter()
            .filter_map(|l| l.breaker.map(|b| b.trip_window().as_nanos()))
            .max()
            .unwrap_or(0);
        let impaired = |at: u64| {
            self.scenario.dependency.impairments.iter().any(|i| {
                let s = i.start().as_nanos();
                let e = i
                    .end()
                    .map_or(u64::MAX, |e| e.as_nanos().saturating_add(trip_window));
                at >= s && at < e
            })
        };
        // Trips outside every impairment, by the rule that made them: the consecutive count,
        // the relative error rate or the failure-ratio ceiling, the slow-call rule, and a
        // failure among the calls a recovery ramp admitted (its own judgement against the
        // learned rate, not the failure-rate rule). A failed probe re-opens from half-open and
        // is no trip from closed: the filter below leaves it out.
        let mut false_trips = [0u64; 4];
        let mut false_trips_total = 0;
        let mut re_trips = 0;
        for trip in &t.trips {
            if !matches!(trip.from, State::Closed | State::Recovering) {
                continue;
            }
            if trip.re_trip {
                re_trips += 1;
            }
            if !impaired(trip.at) {
                let k = match trip.reason {
                    Some(TripReason::ConsecutiveFailures) => Some(0),
                    Some(TripReason::FailureRate | TripReason::FailureRatio) => Some(1),
                    Some(TripReason::SlowCalls) => Some(2),
                    Some(TripReason::RampFailure) => Some(3),
                    // No open from closed or recovering carries another reason (or none); one
                    // that did would count in the total, under no rule's figure.
                    _ => None,
                };
                false_trips_total += 1;
                if let Some(k) = k {
                    false_trips[k] += 1;
                }
            }
        }
        let mut opens_by_reason = std::collections::BTreeMap::new();
        for trip in &t.trips {
            let name = trip.reason.map_or("unknown", TripReason::as_str);
            *opens_by_reason.entry(name.to_string()).or_insert(0) += 1;
        }
        let end_s = self.end as f64 / 1e9;
        Report {
            scenario: self.scenario.name.clone(),
            strategy: strategy.name.clone(),
            seed,
            clients: self.scenario.clients,
            duration_s: end_s,
            fault_window_s: [self.window.0 as f64 / 1e9, self.window.1 as f64 / 1e9],
            calls,
            succeeded: t.succeeded,
            failed: t.failed,
            refused_locally: t.refused,
            saturated: t.saturated,
            availability: ratio(t.succeeded, calls),
            availability_after_trigger,
            healthy_dependency_availability,
            attempts: t.attempts,
            calls_per_s_in_window: per_second(t.window_calls),
            attempts_per_s_in_window: per_second(t.window_attempts),
            wasted_attempts: t.wasted,
            load_multiplier: ratio(t.window_attempts, t.window_calls),
            load_multiplier_run: ratio(t.attempts, calls),
            amplification,
            retries_per_call: ratio(t.retries, calls),
            latency_p50_ms: p50,
            latency_p99_ms: p99,
            served_p99_before_ms: served_p99_before,
            served_p99_in_window_ms: served_p99_in_window,
            breaker_opens: t.trips.len() as u64,
            opens_by_reason,
            probes: t.probes,
            time_to_trip_ms: time_to_trip,
            time_to_trip_last_ms: time_to_trip_last,
            tripped_breakers: firsts.len() as u64,
            time_to_recover_ms: time_to_recover.map(ms),
            dependency_recovered_ms: dependency_recovered.map(ms),
            re_trips,
            false_trips: false_trips_total,
            false_trips_consecutive: false_trips[0],
            false_trips_failure_rate: false_trips[1],
            false_trips_slow: false_trips[2],
            false_trips_ramp: false_trips[3],
            closed_outcomes: t.closed_outcomes,
            refused_by_breaker: t.refused_by_breaker,
            refused_by_budget: t.refused_by_budget,
            refused_by_limits: t.refused_by_limits,
            hedges: t.hedges,
            unprobed_attempts_while_open: t.unprobed_while_open,
            opens_per_second: {
                let mut opens = Vec::new();
                for trip in &t.trips {
                    bump(&mut opens, trip.at);
                }
                opens
            },
            calls_per_second: std::mem::take(&mut t.calls_ps),
            attempts_per_second: std::mem::take(&mut t.attempts_ps),
            successes_per_second: std::mem::take(&mut t.successes_ps),
            failures_per_second: std::mem::take(&mut t.failures_ps),
            refusals_per_second: std::mem::take(&mut t.refusals_ps),
            saturated_per_second: std::mem::take(&mut t.saturated_ps),
        }
    }
}

/// The `q`th percentile (nearest rank) of `samples` in ns, in ms; `None` when there are none.
/// Reorders `samples` (a selection, not a sort).
fn percentile_ms(samples: &mut [u64], q: u64) -> Option<f64> {
    let n = samples.len() as u64;
    let rank = usize::try_from((q * n).div_ceil(100).max(1) - 1).ok()?;
    if rank >= samples.len() {
        return None;
    }
    let (_, &mut ns, _) = samples.select_nth_unstable(rank);
    Some(ns as f64 / 1e6)
}

/// The breaker transitions an event sink saw: (from, to, reason).
type Seen = Vec<(State, State, Option<TripReason>)>;

fn collect(e: Event<'_>, seen: &mut Seen) {
    if let Event::StateChanged {
        from, to, reason, ..
    } = e
    {
        seen.push((from, to, reason));
    }
}

fn record_trips(
    ls: &mut LayerState,
    tally: &mut Tally,
    first_impairment: Option<u64>,
    now: u64,
    seen: &Seen,
) {
    for &(from, to, reason) in seen {
        if to != State::Open {
            continue;
        }
        tally.trips.push(Trip {
            at: now,
            from,
            reason,
            re_trip: ls.opened,
        });
        ls.opened = true;
        if ls.first_trip.is_none() && first_impairment.is_some_and(|s| now >= s) {
            ls.first_trip = Some(now);
        }
    }
}

/// The time from `from` to the start of the first full second (starting at a call's start,
/// at or after `from`, ending by `end`) in which every call succeeded; `log` is sorted by start.
fn first_good_second(log: &[(u64, bool)], from: u64, end: u64) -> Option<u64> {
    let begin = log.partition_point(|&(s, _)| s < from);
    let mut next_failure = begin;
    for i in begin..log.len() {
        let (s, _) = log[i];
        if s.saturating_add(SECOND) > end {
            return None;
        }
        if next_failure < i {
            next_failure = i;
        }
        while next_failure < log.len() && log[next_failure].1 {
            next_failure += 1;
        }
        let clear_until = log.get(next_failure).map_or(u64::MAX, |&(t, _)| t);
        if clear_until >= s.saturating_add(SECOND) {
            return Some(s - from);
        }
    }
    None
}
