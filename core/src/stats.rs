//! The breaker's statistics: the sliding trip window, the error-rate baseline and the latency
//! baseline. They only measure; the decision to trip is [`trip_reason`], a pure function of their
//! readings and the settings, so the single-threaded and shared breakers decide identically.

use crate::breaker::TripReason;
use crate::settings::{BreakerSettings, TRIP_BUCKETS};
use crate::{Duration, Instant};

/// Counts in one bucket of a sliding window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Outcomes that enter the ratios (successes and transient failures).
    pub(crate) calls: u32,
    /// Transient failures (timeouts included).
    pub(crate) failures: u32,
    /// Slow calls.
    pub(crate) slow: u32,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.calls = self.calls.saturating_add(other.calls);
        self.failures = self.failures.saturating_add(other.failures);
        self.slow = self.slow.saturating_add(other.slow);
    }
}

/// A sliding window of [`TRIP_BUCKETS`] buckets, rotated on write: a bucket whose time has
/// passed is cleared before it is reused, and a read ignores buckets older than the window.
#[derive(Clone, Debug)]
pub(crate) struct Ring {
    buckets: [Counts; TRIP_BUCKETS],
    /// Absolute index (time / width) of the newest bucket written.
    head: u64,
}

impl Ring {
    const fn new() -> Ring {
        Ring {
            buckets: [Counts {
                calls: 0,
                failures: 0,
                slow: 0,
            }; TRIP_BUCKETS],
            head: 0,
        }
    }

    fn index(now: Instant, width: Duration) -> u64 {
        now.as_nanos().checked_div(width.as_nanos()).unwrap_or(0)
    }

    fn slot(index: u64) -> usize {
        // TRIP_BUCKETS is small, so the remainder always fits a usize.
        usize::try_from(index.checked_rem(TRIP_BUCKETS as u64).unwrap_or(0)).unwrap_or(0)
    }

    /// Adds `c` to the bucket `now` falls in, clearing the buckets that time has passed; returns
    /// what those cleared buckets held.
    fn record(&mut self, now: Instant, width: Duration, c: Counts) -> Counts {
        let idx = Ring::index(now, width);
        let mut evicted = Counts::default();
        if idx > self.head {
            let stale = idx.saturating_sub(self.head).min(TRIP_BUCKETS as u64);
            for k in 1..=stale {
                if let Some(b) = self.buckets.get_mut(Ring::slot(self.head.wrapping_add(k))) {
                    evicted.add(*b);
                    *b = Counts::default();
                }
            }
            self.head = idx;
        }
        // A clock that stepped back writes into the newest bucket: no time passed.
        if let Some(b) = self.buckets.get_mut(Ring::slot(self.head)) {
            b.add(c);
        }
        evicted
    }

    /// The sums over the buckets inside the window at `now`, and over those that time has
    /// pushed out of it but no write has cleared yet.
    fn split(&self, now: Instant, width: Duration) -> (Counts, Counts) {
        let idx = Ring::index(now, width).max(self.head);
        let oldest_inside = idx.saturating_sub(LAST_BUCKET);
        let mut inside = Counts::default();
        let mut outside = Counts::default();
        for k in 0..TRIP_BUCKETS as u64 {
            let Some(j) = self.head.checked_sub(k) else {
                break;
            };
            if let Some(b) = self.buckets.get(Ring::slot(j)) {
                if j >= oldest_inside {
                    inside.add(*b);
                } else {
                    outside.add(*b);
                }
            }
        }
        (inside, outside)
    }

    /// The sum over the buckets still inside the window at `now`.
    fn totals(&self, now: Instant, width: Duration) -> Counts {
        self.split(now, width).0
    }

    /// Everything the ring holds.
    fn sum(&self) -> Counts {
        let mut sum = Counts::default();
        for b in &self.buckets {
            sum.add(*b);
        }
        sum
    }

    fn clear(&mut self) {
        self.buckets = [Counts::default(); TRIP_BUCKETS];
    }
}

/// Lowest octave the latency histogram resolves: 2^10 ns (about 1 us). Faster calls read as
/// the first bucket's bound, which is still never below the truth.
const HIST_MIN_EXP: u32 = 10;
/// Index distance from the newest bucket to the oldest still inside a window.
const LAST_BUCKET: u64 = TRIP_BUCKETS as u64 - 1;
/// Octaves covered: up to 2^40 ns (about 18 minutes).
const HIST_OCTAVES: u32 = 30;
/// Sub-buckets per octave: 8, so a bucket's upper bound is at most 12.5% above any value in it.
const HIST_SUB: u32 = 8;
/// Buckets in the latency histogram.
pub(crate) const HIST_BUCKETS: usize = (HIST_OCTAVES * HIST_SUB) as usize;

/// A fixed-size log-linear histogram of successful calls' latencies, decayed by halving every
/// half baseline window, and forgotten after a whole window without a sample (an idle estimator
/// reports nothing rather than something stale). Integer maths only.
#[derive(Clone, Debug)]
pub(crate) struct LatencyBaseline {
    counts: [u16; HIST_BUCKETS],
    total: u32,
    /// Index of the half-window period the counts were last decayed in.
    period: u64,
    /// When the last sample arrived.
    last_sample: Option<Instant>,
}

impl LatencyBaseline {
    const fn new() -> LatencyBaseline {
        LatencyBaseline {
            counts: [0; HIST_BUCKETS],
            total: 0,
            period: 0,
            last_sample: None,
        }
    }

    /// The bucket a latency falls in.
    pub(crate) fn bucket(nanos: u64) -> usize {
        let exp = 63u32.saturating_sub(nanos.leading_zeros());
        if nanos == 0 || exp < HIST_MIN_EXP {
            return 0;
        }
        if exp >= HIST_MIN_EXP + HIST_OCTAVES {
            return HIST_BUCKETS - 1;
        }
        // exp >= HIST_MIN_EXP (10) here, so the shifts and subtractions cannot wrap.
        let sub = nanos.checked_shr(exp.saturating_sub(3)).unwrap_or(0) & u64::from(HIST_SUB - 1);
        let idx = exp
            .saturating_sub(HIST_MIN_EXP)
            .saturating_mul(HIST_SUB)
            .saturating_add(u32::try_from(sub).unwrap_or(0));
        usize::try_from(idx)
            .unwrap_or(HIST_BUCKETS - 1)
            .min(HIST_BUCKETS - 1)
    }

    /// The exclusive upper bound of a bucket: every latency in it is below this and at least
    /// 8/9 of it, so reading a bucket as its bound is within 12.5% above, never below.
    pub(crate) fn upper_bound(bucket: usize) -> Duration {
        let b = u32::try_from(bucket.min(HIST_BUCKETS - 1)).unwrap_or(0);
        let exp = (b / HIST_SUB).saturating_add(HIST_MIN_EXP);
        let sub = u64::from(b % HIST_SUB);
        let mantissa = (HIST_SUB as u64).saturating_add(sub).saturating_add(1);
        // exp is at most 39 and the mantissa below 17, so the shift cannot overflow.
        Duration::from_nanos(
            mantissa
                .checked_shl(exp.saturating_sub(3))
                .unwrap_or(u64::MAX),
        )
    }

    fn decay(&mut self, now: Instant, half_window: Duration) {
        if let Some(last) = self.last_sample {
            if now.saturating_duration_since(last) >= half_window.saturating_mul(2) {
                self.counts = [0; HIST_BUCKETS];
                self.total = 0;
            }
        }
        let period = now
            .as_nanos()
            .checked_div(half_window.as_nanos())
            .unwrap_or(0);
        if period > self.period {
            let halvings = period.saturating_sub(self.period).min(16);
            let shift = u32::try_from(halvings).unwrap_or(16);
            self.halve(shift);
            self.period = period;
        }
    }

    fn halve(&mut self, shift: u32) {
        let mut total = 0u32;
        for c in &mut self.counts {
            *c = c.checked_shr(shift).unwrap_or(0);
            total = total.saturating_add(u32::from(*c));
        }
        self.total = total;
    }

    fn record(&mut self, now: Instant, half_window: Duration, latency: Duration) {
        self.decay(now, half_window);
        let idx = LatencyBaseline::bucket(latency.as_nanos());
        if self.counts.get(idx).copied() == Some(u16::MAX) {
            // Keep the shape, lose the oldest half of the weight.
            self.halve(1);
        }
        if let Some(c) = self.counts.get_mut(idx) {
            *c = c.saturating_add(1);
            self.total = self.total.saturating_add(1);
        }
        self.last_sample = Some(self.last_sample.map_or(now, |l| l.max(now)));
    }

    /// Samples currently weighing in the baseline.
    pub(crate) fn samples(&self) -> u32 {
        self.total
    }

    /// The median, read as its bucket's upper bound; `None` without samples.
    pub(crate) fn median(&self) -> Option<Duration> {
        if self.total == 0 {
            return None;
        }
        let rank = self.total.div_ceil(2);
        let mut seen = 0u32;
        for (i, c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(u32::from(*c));
            if seen >= rank {
                return Some(LatencyBaseline::upper_bound(i));
            }
        }
        None
    }

    /// `true` once the baseline is stale at `now` (no sample for a whole window).
    fn expired(&self, now: Instant, half_window: Duration) -> bool {
        match self.last_sample {
            Some(last) => now.saturating_duration_since(last) >= half_window.saturating_mul(2),
            None => true,
        }
    }
}

/// Everything a full breaker measures.
#[derive(Clone, Debug)]
pub(crate) struct Stats {
    trip: Ring,
    errors: Ring,
    latency: LatencyBaseline,
}

/// What the statistics read at one instant: the inputs of [`trip_reason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Readings {
    pub(crate) window: Counts,
    pub(crate) baseline_calls: u32,
    pub(crate) baseline_failures: u32,
}

/// What one outcome adds to the statistics.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    /// Enters the trip window (the breaker was closed when it was granted, and it is counted).
    pub(crate) to_window: bool,
    pub(crate) counted: bool,
    pub(crate) failure: bool,
    pub(crate) slow: bool,
    /// The latency, when it may feed the latency baseline (successes only).
    pub(crate) baseline_latency: Option<Duration>,
}

impl Stats {
    pub(crate) const fn new() -> Stats {
        Stats {
            trip: Ring::new(),
            errors: Ring::new(),
            latency: LatencyBaseline::new(),
        }
    }

    /// Records one outcome. The error baseline is fed what leaves the trip window (and the
    /// outcomes that never enter it), so a spike being judged has not yet moved the baseline
    /// it is judged against.
    pub(crate) fn record(&mut self, now: Instant, s: &BreakerSettings, sample: Sample) {
        let c = Counts {
            calls: u32::from(sample.counted),
            failures: u32::from(sample.counted && sample.failure),
            slow: u32::from(sample.counted && sample.slow),
        };
        let to_baseline = if sample.to_window && sample.counted {
            self.trip.record(now, s.bucket_width(), c)
        } else {
            c
        };
        if to_baseline.calls > 0 {
            self.errors.record(
                now,
                baseline_bucket(s),
                Counts {
                    slow: 0,
                    ..to_baseline
                },
            );
        }
        if let Some(latency) = sample.baseline_latency {
            self.latency.record(now, half_baseline(s), latency);
        }
    }

    pub(crate) fn readings(&self, now: Instant, s: &BreakerSettings) -> Readings {
        let (window, aged_out) = self.trip.split(now, s.bucket_width());
        let mut base = self.errors.totals(now, baseline_bucket(s));
        base.add(aged_out);
        Readings {
            window,
            baseline_calls: base.calls,
            baseline_failures: base.failures,
        }
    }

    /// The learned median latency of successful calls, if armed-worthy samples exist.
    pub(crate) fn normal_latency(&self, now: Instant, s: &BreakerSettings) -> Option<Duration> {
        if self.latency.expired(now, half_baseline(s)) {
            return None;
        }
        self.latency.median()
    }

    /// Samples in the latency baseline at `now`.
    pub(crate) fn latency_samples(&self, now: Instant, s: &BreakerSettings) -> u32 {
        if self.latency.expired(now, half_baseline(s)) {
            0
        } else {
            self.latency.samples()
        }
    }

    /// Clears the trip window (its counts were evidence for a decision now made). What it held
    /// still measured the dependency, so it moves into the error baseline.
    pub(crate) fn clear_window(&mut self, now: Instant, s: &BreakerSettings) {
        let held = self.trip.sum();
        self.trip.clear();
        if held.calls > 0 {
            self.errors
                .record(now, baseline_bucket(s), Counts { slow: 0, ..held });
        }
    }
}

fn baseline_bucket(s: &BreakerSettings) -> Duration {
    s.baseline_window()
        .checked_div(TRIP_BUCKETS as u64)
        .unwrap_or(Duration::ZERO)
}

fn half_baseline(s: &BreakerSettings) -> Duration {
    s.baseline_window().checked_div(2).unwrap_or(Duration::ZERO)
}

/// The slow-call threshold in force: the lower of the absolute threshold and the multiple of
/// the learned median (once armed). `None` when neither applies.
pub(crate) fn slow_threshold(
    s: &BreakerSettings,
    median: Option<Duration>,
    samples: u32,
) -> Option<Duration> {
    let relative = match (s.slow_calls(), median) {
        (Some(rule), Some(m)) if samples >= rule.arming_calls() => Some(rule.multiple().apply(m)),
        _ => None,
    };
    match (relative, s.slow_threshold()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The trip decision over a window's readings: which rule, if any, says the dependency is
/// failing. Consecutive failures are judged by the control state, not here.
pub(crate) fn trip_reason(r: &Readings, s: &BreakerSettings) -> Option<TripReason> {
    let w = r.window;
    if w.calls < s.minimum_calls() {
        return None;
    }
    let calls = u64::from(w.calls);
    let failures = u64::from(w.failures);
    // The relative rule's trip point: max(floor, multiple x baseline), lowered by the absolute
    // ceiling when one is set ("a measurement may tighten a constant, never loosen one").
    if let Some(ceiling) = s.failure_ratio() {
        if ceiling.reached_by(failures, calls) {
            return Some(TripReason::FailureRatio);
        }
    }
    if let Some(rule) = s.failure_rate() {
        let armed = r.baseline_calls >= rule.arming_outcomes();
        if armed && w.failures >= rule.min_failures() && rule.floor().reached_by(failures, calls) {
            // failures/calls > multiple * base_failures/base_calls, exactly:
            // failures * base_calls * 1000 > multiple_milli * base_failures * calls
            let lhs = u128::from(failures)
                .saturating_mul(u128::from(r.baseline_calls))
                .saturating_mul(1000);
            let rhs = u128::from(rule.multiple().milli())
                .saturating_mul(u128::from(r.baseline_failures))
                .saturating_mul(u128::from(calls));
            if lhs > rhs {
                return Some(TripReason::FailureRate);
            }
        }
    }
    if (s.slow_calls().is_some() || s.slow_threshold().is_some())
        && s.slow_ratio().reached_by(u64::from(w.slow), calls)
    {
        return Some(TripReason::SlowCalls);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latency_histogram_reads_within_an_eighth_above_never_below() {
        let mut v: u64 = 1024;
        while v < (1u64 << 40) {
            let read = LatencyBaseline::upper_bound(LatencyBaseline::bucket(v)).as_nanos();
            assert!(read > v, "{v} read as {read}");
            assert!(
                read * 8 <= v * 9,
                "{v} read as {read}: more than 12.5% above"
            );
            v = v + v / 7 + 1;
        }
        // Below the resolved range: still never below.
        assert!(LatencyBaseline::upper_bound(LatencyBaseline::bucket(3)).as_nanos() > 3);
    }

    #[test]
    fn the_median_is_the_middle_sample() {
        let mut h = LatencyBaseline::new();
        let half = Duration::from_secs(150);
        let now = Instant::from_secs(1);
        for ms in [10u64, 20, 30, 40, 50] {
            h.record(now, half, Duration::from_millis(ms));
        }
        let m = h.median().unwrap();
        assert!(m > Duration::from_millis(30) && m <= Duration::from_micros(33_750));
    }

    #[test]
    fn the_ring_forgets_buckets_older_than_the_window() {
        let mut r = Ring::new();
        let w = Duration::from_secs(3);
        let c = Counts {
            calls: 1,
            failures: 1,
            slow: 0,
        };
        r.record(Instant::from_secs(0), w, c);
        r.record(Instant::from_secs(10), w, c);
        assert_eq!(r.totals(Instant::from_secs(10), w).calls, 2);
        assert_eq!(r.totals(Instant::from_secs(29), w).calls, 2);
        assert_eq!(r.totals(Instant::from_secs(30), w).calls, 1);
        assert_eq!(r.totals(Instant::from_secs(40), w).calls, 0);
        assert_eq!(
            r.split(Instant::from_secs(40), w).1.calls,
            2,
            "aged out, not yet cleared"
        );
        assert_eq!(
            r.record(Instant::from_secs(100), w, c).calls,
            2,
            "evicted on write"
        );
        assert_eq!(r.totals(Instant::from_secs(100), w).calls, 1);
    }

    #[test]
    fn the_latency_baseline_decays_and_expires_when_idle() {
        let mut h = LatencyBaseline::new();
        let half = Duration::from_secs(150);
        for i in 0..100 {
            h.record(Instant::from_millis(i), half, Duration::from_millis(20));
        }
        assert_eq!(h.samples(), 100);
        h.decay(Instant::from_secs(151), half);
        assert_eq!(h.samples(), 50);
        assert!(h.expired(Instant::from_secs(301), half));
        assert!(!h.expired(Instant::from_secs(299), half));
    }
}
