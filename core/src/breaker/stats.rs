//! The breaker's statistics: the sliding trip window, the error-rate baseline and the latency
//! baseline. They only measure; the decision to trip is [`trip_reason`], a pure function of their
//! readings and the settings, so the single-threaded and shared breakers decide identically.

use crossbeam_utils::CachePadded;

use crate::breaker::settings::{BreakerSettings, MAX_COUNT, TRIP_BUCKETS};
use crate::cell::{const_unless_loom, field, put, word, words, Word};
use crate::loom::{AtomicU64, Ordering};
use crate::state::TripReason;
use crate::time::{div_rem_u32, div_u64};
use crate::time::{Duration, Instant};

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

/// Bits of a bucket word for each count.
const CALL_BITS: u32 = 22;
const FAIL_BITS: u32 = 21;
const SLOW_BITS: u32 = 21;
/// The top bit of each count in a bucket word. A stored count stays below it: a bucket whose
/// count would reach it is halved (see [`Counts::fit`]).
const HIGH: u64 = put(1, CALL_BITS - 1, 1)
    | put(1, CALL_BITS + FAIL_BITS - 1, 1)
    | put(1, CALL_BITS + FAIL_BITS + SLOW_BITS - 1, 1);

impl Counts {
    fn add(&mut self, other: Counts) {
        self.calls = self.calls.saturating_add(other.calls);
        self.failures = self.failures.saturating_add(other.failures);
        self.slow = self.slow.saturating_add(other.slow);
    }

    /// These counts, halved together until each is below the top bit of its width in a bucket
    /// word (2 million calls, 1 million failures or slow calls). Halving keeps the ratios the
    /// rules read; a count stuck at its maximum while the others go on would distort them (4
    /// million calls and 2 million failures would read 50% whatever the truth). A bucket only
    /// gets there past some 700 000 calls a second.
    fn fit(self) -> Counts {
        let mut c = self;
        while c.calls >= 1 << (CALL_BITS - 1)
            || c.failures >= 1 << (FAIL_BITS - 1)
            || c.slow >= 1 << (SLOW_BITS - 1)
        {
            c = Counts {
                calls: c.calls >> 1,
                failures: c.failures >> 1,
                slow: c.slow >> 1,
            };
        }
        c
    }

    /// Packs into one word, fitted first: 22 bits of calls, 21 of failures, 21 of slow calls.
    #[inline]
    fn pack(self) -> u64 {
        let c = self.fit();
        put(u64::from(c.calls), 0, CALL_BITS)
            | put(u64::from(c.failures), CALL_BITS, FAIL_BITS)
            | put(u64::from(c.slow), CALL_BITS + FAIL_BITS, SLOW_BITS)
    }

    /// `inc` (packed) added to the packed counts `w` (both below their top bits), fitted: one
    /// addition while the sum stays below the top bits too.
    #[inline]
    fn add_packed(w: u64, inc: u64) -> u64 {
        let sum = w.wrapping_add(inc);
        if sum & HIGH == 0 {
            return sum;
        }
        Counts::add_fitted(w, inc)
    }

    /// [`Counts::add_packed`] when a count reaches its top bit.
    #[inline(never)]
    fn add_fitted(w: u64, inc: u64) -> u64 {
        let mut sum = Counts::unpack(w);
        sum.add(Counts::unpack(inc));
        sum.pack()
    }

    fn unpack(w: u64) -> Counts {
        let get = |at: u32, bits: u32| u32::try_from(field(w, at, bits)).unwrap_or(u32::MAX);
        Counts {
            calls: get(0, CALL_BITS),
            failures: get(CALL_BITS, FAIL_BITS),
            slow: get(CALL_BITS + FAIL_BITS, SLOW_BITS),
        }
    }
}

/// A sliding window of [`TRIP_BUCKETS`] buckets of counts, a bucket being the time / width.
/// `head` is the newest bucket written, and the slots hold the buckets `head - 9 ..= head`, bucket
/// `i` in slot `i % 10`: a write that moves `head` on empties the slots of the buckets it leaves
/// behind and hands their counts back so they can move on, and a read places each slot by its
/// distance from `head`, so no slot needs a word saying which bucket it holds. In the shared form
/// a count racing a rotation can land in the neighbouring bucket, or leave with the bucket whose
/// slot it raced for: into the error baseline, or dropped with that bucket when it is too old
/// for the baseline (the first rotation after a long idle).
#[derive(Clone, Debug)]
pub(crate) struct Ring<W> {
    counts: [W; TRIP_BUCKETS],
    /// The newest bucket written.
    head: W,
}

impl<W: Word> Ring<W> {
    const_unless_loom! {
        fn new() -> Ring<W> {
            Ring { counts: words![W; TRIP_BUCKETS], head: word!(W) }
        }
    }

    fn index_of(now: Instant, width: Duration) -> u64 {
        div_u64(now.as_nanos(), width.as_nanos()).unwrap_or(0)
    }

    /// The slot of a bucket.
    fn slot(index: u64) -> usize {
        // TRIP_BUCKETS is small, so the remainder always fits a usize.
        div_rem_u32(index, TRIP_BUCKETS as u32).map_or(0, |(_, r)| r as usize)
    }

    /// Adds the packed counts `inc` to `bucket`, one of the window's.
    #[inline]
    fn add(&self, bucket: u64, inc: u64) {
        if let Some(counts) = self.counts.get(Ring::<W>::slot(bucket)) {
            counts.update(|w| Counts::add_packed(w, inc));
        }
    }

    /// The slot before `k`, going round.
    fn before(k: usize) -> usize {
        k.checked_sub(1).unwrap_or(TRIP_BUCKETS - 1)
    }

    /// Adds `c` to the bucket `now` falls in. When that moves the head on, returns what the
    /// buckets it leaves behind held, of those no more than `keep()` buckets old (asked only
    /// then). The common case, `now` in the head's bucket, is inlined where nanoseconds count;
    /// where flash does, the whole is kept in one place.
    #[cfg_attr(target_pointer_width = "64", inline)]
    #[cfg_attr(not(target_pointer_width = "64"), inline(never))]
    fn record(&self, now: Instant, width: Duration, c: Counts, keep: &dyn Fn() -> u64) -> Counts {
        let head = self.head.get();
        // The head's bucket spares the division while `now` stays in it.
        let start = head.saturating_mul(width.as_nanos());
        let t = now.as_nanos();
        if t >= start && t.wrapping_sub(start) < width.as_nanos() {
            self.add(head, c.pack());
            return Counts::default();
        }
        self.record_elsewhere(now, width, c, keep)
    }

    /// [`Ring::record`] when `now` is not in the head's bucket: an older bucket still in the
    /// window, or a newer one that moves the head on.
    #[inline(never)]
    fn record_elsewhere(
        &self,
        now: Instant,
        width: Duration,
        c: Counts,
        keep: &dyn Fn() -> u64,
    ) -> Counts {
        let idx = Ring::<W>::index_of(now, width);
        let inc = c.pack();
        loop {
            let head = self.head.get();
            if idx <= head {
                // This bucket; for a clock that stepped back past the window, the newest: no
                // time passed.
                let at = if head.saturating_sub(idx) < TRIP_BUCKETS as u64 {
                    idx
                } else {
                    head
                };
                self.add(at, inc);
                return Counts::default();
            }
            if self.head.cas(head, idx) {
                return self.rotate(head, idx, inc, keep);
            }
        }
    }

    /// After the head moved from `from` to `to`: empties the slots of the buckets now out of
    /// the window (at most a lap of them), the newest starting over with `inc`. Returns what
    /// they held, of the buckets no more than `keep()` old.
    #[inline]
    fn rotate(&self, from: u64, to: u64, inc: u64, keep: &dyn Fn() -> u64) -> Counts {
        let keep = keep();
        let lap = TRIP_BUCKETS as u64;
        let gap = to.saturating_sub(from);
        // The buckets entering the window, newest first, slot by slot back from `to`'s. Each
        // slot held one of from - 9 ..= from: `from - back`, `back` in 0..10.
        let ahead = div_rem_u32(gap, TRIP_BUCKETS as u32).map_or(0, |(_, r)| u64::from(r));
        let mut back = match lap.saturating_sub(ahead) {
            back if back < lap => back,
            _ => 0,
        };
        let mut k = Ring::<W>::slot(to);
        let mut left = Counts::default();
        for step in 0..gap.min(lap) {
            let Some(counts) = self.counts.get(k) else {
                break;
            };
            let old = counts.swap(if step == 0 { inc } else { 0 });
            let young = from
                .checked_sub(back)
                .is_some_and(|held| to.saturating_sub(held) <= keep);
            if young {
                left.add(Counts::unpack(old));
            }
            k = Ring::<W>::before(k);
            back = match back.saturating_add(1) {
                next if next < lap => next,
                _ => 0,
            };
        }
        left
    }

    /// The sums over the buckets inside the window at `now`, and over those that time has
    /// pushed out of it, but by no more than `keep` buckets, and that no write has replaced yet.
    fn split(&self, now: Instant, width: Duration, keep: u64) -> (Counts, Counts) {
        let idx = Ring::<W>::index_of(now, width);
        let head = self.head.get();
        let mut inside = Counts::default();
        let mut outside = Counts::default();
        let newest = Ring::<W>::slot(head);
        for (k, counts) in self.counts.iter().enumerate() {
            // Slot k holds the bucket `back` before the head.
            let back = match newest.checked_sub(k) {
                Some(back) => back,
                None => newest.saturating_add(TRIP_BUCKETS).saturating_sub(k),
            };
            let Some(at) = head.checked_sub(back as u64) else {
                continue;
            };
            let age = idx.saturating_sub(at);
            if age < TRIP_BUCKETS as u64 {
                inside.add(Counts::unpack(counts.get()));
            } else if age <= keep {
                outside.add(Counts::unpack(counts.get()));
            }
        }
        (inside, outside)
    }

    /// Empties every bucket, returning what they held.
    fn clear(&self) -> Counts {
        let mut held = Counts::default();
        for counts in &self.counts {
            held.add(Counts::unpack(counts.swap(0)));
        }
        held
    }
}

/// A function naming the calling thread's lane of a striped breaker's counters (see
/// [`SharedBreaker::with_lane_hint`](crate::SharedBreaker::with_lane_hint)): any number, taken
/// modulo the lane count; what matters is that it stays the same for a thread and differs
/// between threads running at once.
pub type LaneHint = fn() -> usize;

/// A set of counters kept once (the single-threaded forms) or once per lane (the shared form,
/// where each thread writes its own lane and a reading sums them all). Its only writers are
/// the outcomes; every reader sums [`Stripes::at`] over `0..COUNT`.
pub(crate) trait Stripes {
    /// The counters in one lane.
    type Item;
    /// How many lanes.
    const COUNT: usize;
    /// Every lane zeroed, for `const` construction.
    #[cfg(not(loom))]
    const NEW: Self;
    /// Every lane zeroed (loom's atomics cannot be built in a `const`).
    #[cfg(loom)]
    fn new() -> Self;
    /// Lane `i` (`None` past the last).
    fn at(&self, i: usize) -> Option<&Self::Item>;
    /// The lane the calling thread writes: always 0 with one lane, else the hint's.
    #[inline]
    fn pick(&self) -> usize {
        0
    }
    /// Notes that lane `i` has been written, before its first write.
    #[inline]
    fn mark(&self, _i: usize) {}
    /// Bit `min(k, 63)` is set when lane `k` may hold counts: the lanes a scan reads.
    #[inline]
    fn written(&self) -> u64 {
        1
    }
}

/// The bit of lane `k` in [`Stripes::written`].
#[inline]
fn lane_bit(k: usize) -> u64 {
    1u64.checked_shl(u32::try_from(k).unwrap_or(63).min(63))
        .unwrap_or(0)
}

/// Counters that can start at zero in a `const`.
pub(crate) trait Zeroed {
    /// Zeroed counters.
    #[cfg(not(loom))]
    const ZERO: Self;
    /// Zeroed counters.
    #[cfg(loom)]
    fn zero() -> Self;
}

#[cfg(not(loom))]
macro_rules! zeroed {
    ($t:ty) => {
        <$t as Zeroed>::ZERO
    };
}
#[cfg(loom)]
macro_rules! zeroed {
    ($t:ty) => {
        <$t as Zeroed>::zero()
    };
}

#[cfg(not(loom))]
macro_rules! stripes {
    ($t:ty) => {
        <$t as Stripes>::NEW
    };
}
#[cfg(loom)]
macro_rules! stripes {
    ($t:ty) => {
        <$t as Stripes>::new()
    };
}

/// One lane, unpadded: the single-threaded forms' statistics, with no byte added.
#[derive(Clone, Debug)]
pub(crate) struct One<T>(T);

impl<T: Zeroed> Stripes for One<T> {
    type Item = T;
    const COUNT: usize = 1;
    #[cfg(not(loom))]
    const NEW: Self = One(zeroed!(T));
    #[cfg(loom)]
    fn new() -> Self {
        One(zeroed!(T))
    }
    #[inline]
    fn at(&self, _: usize) -> Option<&T> {
        Some(&self.0)
    }
}

/// `N` lanes, each on its own cache line (two on the processors that fetch lines in pairs), so
/// threads writing different lanes never write the same line; and the hint that picks a
/// thread's lane (none: every thread writes lane 0).
#[derive(Debug)]
pub(crate) struct Padded<T, const N: usize> {
    lanes: [CachePadded<T>; N],
    hint: Option<LaneHint>,
    /// The lanes written so far (see [`Stripes::written`]): a scan reads only those, so one
    /// thread's breaker scans one lane, as the single-threaded form does.
    written: AtomicU64,
}

impl<T, const N: usize> Padded<T, N> {
    /// Sets the hint that picks a thread's lane.
    pub(crate) const fn set_hint(&mut self, hint: LaneHint) {
        self.hint = Some(hint);
    }
}

impl<T: Zeroed, const N: usize> Stripes for Padded<T, N> {
    type Item = T;
    const COUNT: usize = N;
    #[cfg(not(loom))]
    const NEW: Self = Padded {
        lanes: [const { CachePadded::new(zeroed!(T)) }; N],
        hint: None,
        written: AtomicU64::new(0),
    };
    #[cfg(loom)]
    fn new() -> Self {
        Padded {
            lanes: core::array::from_fn(|_| CachePadded::new(zeroed!(T))),
            hint: None,
            written: AtomicU64::new(0),
        }
    }
    #[inline]
    fn at(&self, i: usize) -> Option<&T> {
        self.lanes.get(i).map(|lane| &**lane)
    }
    #[inline]
    fn pick(&self) -> usize {
        match self.hint {
            Some(hint) if N > 1 => hint().checked_rem(N).unwrap_or(0),
            _ => 0,
        }
    }
    #[inline]
    fn mark(&self, i: usize) {
        let bit = lane_bit(i);
        // Once per lane: after that, a load of a word that no longer changes.
        if self.written.load(Ordering::Relaxed) & bit == 0 {
            self.written.fetch_or(bit, Ordering::AcqRel);
        }
    }
    #[inline]
    fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }
}

impl<W: Word> Zeroed for Ring<W> {
    #[cfg(not(loom))]
    const ZERO: Self = Ring::new();
    #[cfg(loom)]
    fn zero() -> Self {
        Ring::new()
    }
}

/// The latency histogram's counts in one lane: 240 sixteen-bit counts, four to a word.
#[derive(Clone, Debug)]
pub(crate) struct HistCounts<W>([W; HIST_WORDS]);

impl<W: Word> Zeroed for HistCounts<W> {
    #[cfg(not(loom))]
    const ZERO: Self = HistCounts(words![W; HIST_WORDS]);
    #[cfg(loom)]
    fn zero() -> Self {
        HistCounts(words![W; HIST_WORDS])
    }
}

/// Lowest octave the latency histogram resolves: 2^10 ns (about 1 us). Faster calls read as
/// the first bucket's bound, which is still never below the truth.
const HIST_MIN_EXP: u32 = 10;
/// Octaves covered: up to 2^40 ns (about 18 minutes).
const HIST_OCTAVES: u32 = 30;
/// Sub-buckets per octave: 8, so a bucket's upper bound is at most 12.5% above any value in it.
const HIST_SUB: u32 = 8;
/// Buckets in the latency histogram.
pub(crate) const HIST_BUCKETS: usize = (HIST_OCTAVES * HIST_SUB) as usize;
/// 16-bit bucket counts, four to a word.
const LANES: usize = 4;
const HIST_WORDS: usize = HIST_BUCKETS / LANES;
/// The median is re-read whenever a bucket's count passes a multiple of this (and at least
/// every trip-window bucket, and after each decay). A re-read scans the whole histogram (some
/// 1 800 instructions), so this sets its share of a sample's cost (about 7 of 150); a baseline
/// is meant to move slowly anyway, or a brownout would teach it its own latency.
const MEMO_EVERY: u64 = 256;
/// While the histogram holds fewer samples than this, every sample re-reads the median.
const WARM_SAMPLES: u64 = 64;

/// A fixed-size log-linear histogram of successful calls' latencies: 240 sixteen-bit counts,
/// halved every half baseline window (and whenever one would overflow), and forgotten after a
/// whole window without a sample: an idle estimator reports nothing rather than something stale.
/// The median is memoized, so reading the slow-call threshold on the call path is one load.
#[derive(Clone, Debug)]
pub(crate) struct Histogram<W, C = One<HistCounts<W>>> {
    /// The counts, in one lane or one per writing thread (summed by every reading).
    counts: C,
    /// The half-window period the counts were last decayed in.
    period: W,
    /// When the last sample arrived, in ns (+1; 0 for never).
    last_sample: W,
    /// The memoized median: (bucket + 1) in the high half, samples in the low half.
    memo: W,
    /// The memoized slow-call threshold in ns (+1; 0 for none yet).
    slow_at: W,
    /// The memoized 95th-percentile bucket (+1; 0 for none yet).
    tail: W,
    /// Before this instant (ns) a sample needs no check of time at all: no expiry, no decay
    /// and no re-read of the memo can be due. The earliest of the three, as they stood at the
    /// last re-read; each only moves later, so a stale value is early, never late. 0 while
    /// warming up (every sample re-reads the memo).
    check_at: W,
}

impl<W: Word, C: Stripes<Item = HistCounts<W>>> Histogram<W, C> {
    const_unless_loom! {
        pub(crate) fn new() -> Histogram<W, C> {
            Histogram {
                counts: stripes!(C),
                period: word!(W),
                last_sample: word!(W),
                memo: word!(W),
                slow_at: word!(W),
                tail: word!(W),
                check_at: word!(W),
            }
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

    fn lane(w: u64, i: usize) -> u64 {
        field(w, u32::try_from(i).unwrap_or(0).saturating_mul(16), 16)
    }

    /// The words of every lane written so far.
    fn each_word(&self, mut f: impl FnMut(&W)) {
        let written = self.counts.written();
        for k in 0..C::COUNT {
            if written & lane_bit(k) == 0 {
                continue;
            }
            if let Some(counts) = self.counts.at(k) {
                counts.0.iter().for_each(&mut f);
            }
        }
    }

    /// The four counts of word `wi`, summed over the lanes `written` names.
    #[inline]
    fn counts_at(&self, wi: usize, written: u64) -> [u64; LANES] {
        // The even and the odd counts apart, each in 32 bits: a sum of 65 536 lanes fits.
        const EVEN: u64 = 0x0000_FFFF_0000_FFFF;
        let (mut even, mut odd) = (0u64, 0u64);
        for k in 0..C::COUNT {
            if written & lane_bit(k) == 0 {
                continue;
            }
            if let Some(w) = self.counts.at(k).and_then(|c| c.0.get(wi)) {
                let v = w.get();
                even = even.wrapping_add(v & EVEN);
                odd = odd.wrapping_add((v >> 16) & EVEN);
            }
        }
        [even & 0xFFFF_FFFF, odd & 0xFFFF_FFFF, even >> 32, odd >> 32]
    }

    /// Every count shifted right by `shift`.
    fn halve(&self, shift: u32) {
        self.each_word(|w| {
            w.update(|v| {
                let mut out = 0;
                for i in 0..LANES {
                    let at = u32::try_from(i).unwrap_or(0).saturating_mul(16);
                    out |= put(
                        Histogram::<W>::lane(v, i).checked_shr(shift).unwrap_or(0),
                        at,
                        16,
                    );
                }
                out
            });
        });
    }

    fn clear(&self) {
        self.each_word(|w| {
            w.swap(0);
        });
    }

    /// Recomputes and stores the memoized median, sample count and slow-call threshold.
    fn refresh(&self, s: &BreakerSettings) {
        let total = self.total();
        let mut memo = 0;
        let mut tail = 0;
        if total > 0 {
            let rank = total.div_ceil(2);
            // The 95th percentile's rank, rounded up.
            let rank95 = div_rem_u32(total.saturating_mul(95), 100)
                .map_or(0, |(q, r)| q.saturating_add(u64::from(r > 0)))
                .max(1);
            let mut seen: u64 = 0;
            let written = self.counts.written();
            'scan: for wi in 0..HIST_WORDS {
                for (i, count) in self.counts_at(wi, written).into_iter().enumerate() {
                    seen = seen.saturating_add(count);
                    let bucket = u64::try_from(wi.saturating_mul(LANES).saturating_add(i))
                        .unwrap_or(0)
                        .saturating_add(1);
                    if memo == 0 && seen >= rank {
                        memo = (bucket << 32) | total.min(u64::from(u32::MAX));
                    }
                    if seen >= rank95 {
                        tail = bucket;
                        break 'scan;
                    }
                }
            }
        }
        self.tail.swap(tail);
        self.memo.swap(memo);
        let (median, samples) = self.reading();
        let threshold =
            slow_threshold(s, median, samples).map_or(0, |t| t.as_nanos().saturating_add(1));
        self.slow_at.swap(threshold);
    }

    /// A lane's count passing a multiple of this plus one re-reads the memo: [`MEMO_EVERY`]
    /// times the lanes written (rounded up to a power of two), so that a re-read, which scans
    /// every lane written, comes about every [`MEMO_EVERY`] samples in a bucket, whatever the
    /// number of threads writing.
    #[inline]
    fn memo_mask(&self) -> u64 {
        if C::COUNT == 1 {
            return MEMO_EVERY - 1;
        }
        let lanes = u64::from(self.counts.written().count_ones()).max(1);
        MEMO_EVERY
            .saturating_mul(lanes.next_power_of_two())
            .saturating_sub(1)
    }

    /// Every count, summed over the lanes.
    fn total(&self) -> u64 {
        let mut total: u64 = 0;
        self.each_word(|w| {
            let v = w.get();
            for i in 0..LANES {
                total = total.saturating_add(Histogram::<W>::lane(v, i));
            }
        });
        total
    }

    /// Records a successful call's latency in lane `lane`. Forced inline on 64-bit targets,
    /// as is [`Stats::to_window`]: with the lanes' generics the optimiser left both out of
    /// line, and the two inlined (with the memo check below taking the cheap test first)
    /// took the shared breaker's acquire + success from 27.3 to 22.4 ns (`hot_path`, on-CPU,
    /// one thread; 21 ns before the lanes).
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn record(
        &self,
        now: Instant,
        s: &BreakerSettings,
        half_window: Duration,
        latency: Duration,
        lane: usize,
    ) {
        let t = now.as_nanos();
        // The common case costs one load here: nothing time-driven is due yet. When something
        // may be, the memo is re-read too (its own re-read time is among what `check_at` covers).
        let refresh = t >= self.check_at.get();
        if refresh {
            self.catch_up(now, half_window);
        }
        let (count, halved) = self.add_sample(t, latency, lane);
        // Re-read the median and p95 while warming up, and then at most one trip-window
        // bucket (3 s at the defaults) after the last reading, or when a bucket's count (in its
        // lane: a thread's re-reads come as often as one thread's alone) passes a multiple of
        // 256.
        if refresh || halved || (count.is_multiple_of(MEMO_EVERY) && count & self.memo_mask() == 0)
        {
            self.reread(now, s, half_window);
        }
    }

    /// Counts one latency at `t` (ns) in its bucket in lane `lane` and notes the sample's
    /// time. Returns the bucket's new count in that lane, and `true` when it was full and every
    /// count (in every lane) was halved first (the shape is kept, the oldest half of the weight
    /// lost). Forced inline on 64-bit targets, as [`Histogram::record`] is: with the lanes'
    /// generics the optimiser left it out of line, a call and a spill of registers on every
    /// success. Elsewhere the optimiser decides, which keeps a full firmware image 16 to 24
    /// bytes smaller than an inline hint did.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn add_sample(&self, t: u64, latency: Duration, lane: usize) -> (u64, bool) {
        let bucket = Histogram::<W>::bucket(latency.as_nanos());
        let (wi, i) = (bucket / LANES, bucket % LANES);
        let mut count = 0;
        let mut halved = false;
        self.counts.mark(lane);
        if let Some(w) = self.counts.at(lane).and_then(|c| c.0.get(wi)) {
            let at = u32::try_from(i).unwrap_or(0).saturating_mul(16);
            let one = put(1, at, 16);
            let bump = |v: u64| {
                if Histogram::<W>::lane(v, i) == 0xFFFF {
                    v
                } else {
                    v.wrapping_add(one)
                }
            };
            let (old, mut new) = w.update(bump);
            if old == new {
                // The count is full: keep the shape, lose the oldest half of the weight.
                self.halve(1);
                new = w.update(bump).1;
                halved = true;
            }
            count = Histogram::<W>::lane(new, i);
        }
        // Millisecond resolution is enough to tell an idle baseline: skip the write when the
        // stored instant is that fresh.
        let stamp = t.saturating_add(1);
        if self.last_sample.get().saturating_add(1_000_000) < stamp {
            self.last_sample.fetch_max(stamp);
        }
        (count, halved)
    }

    /// Records a latency for a reader that keeps no memo of the breaker's (the adaptive
    /// limiter reads [`Histogram::quantile`] when it needs one): the same buckets, decay and
    /// forgetting as [`Histogram::record`], with time checked only when something may be due.
    #[inline]
    pub(crate) fn record_plain(&self, now: Instant, half_window: Duration, latency: Duration) {
        let t = now.as_nanos();
        if t >= self.check_at.get() {
            self.catch_up(now, half_window);
            // Next due: the end of the current decay period, or a whole window after the last
            // sample (when it would be forgotten), whichever is first. Stale values are early,
            // never late: both only move later.
            let decay = self
                .period
                .get()
                .saturating_add(1)
                .saturating_mul(half_window.as_nanos());
            let expiry = match self.last_sample.get() {
                0 => u64::MAX,
                last => last
                    .saturating_sub(1)
                    .saturating_add(half_window.saturating_mul(2).as_nanos()),
            };
            // At least the next nanosecond, so a sample that just caught up is not asked to
            // again at the same instant.
            self.check_at
                .swap(decay.min(expiry).max(t.saturating_add(1)));
        }
        let _ = self.add_sample(t, latency, 0);
    }

    /// The bucket at or below which `per_mille` thousandths of the samples fall (the lowest
    /// such bucket, read through [`Histogram::upper_bound`]), and the samples counted; `None`
    /// while empty or once the samples have gone a whole window without a new one. A scan of
    /// the whole histogram: for a reader that needs it now and then, not per call.
    pub(crate) fn quantile(
        &self,
        now: Instant,
        half_window: Duration,
        per_mille: u32,
    ) -> (Option<usize>, u64) {
        if self.expired(now, half_window) {
            return (None, 0);
        }
        let total = self.total();
        if total == 0 {
            return (None, 0);
        }
        // The rank, rounded up, and at least the first sample.
        let rank = div_rem_u32(total.saturating_mul(u64::from(per_mille)), 1000)
            .map_or(total, |(q, r)| q.saturating_add(u64::from(r > 0)))
            .clamp(1, total);
        let mut seen: u64 = 0;
        // A halving racing the scan can leave fewer samples than the rank: no reading.
        let bucket = self.scan_from(0, &mut |count| {
            seen = seen.saturating_add(count);
            seen >= rank
        });
        (bucket, total)
    }

    /// Re-reads the memo and sets when time next needs checking.
    #[inline(never)]
    fn reread(&self, now: Instant, s: &BreakerSettings, half_window: Duration) {
        self.refresh(s);
        let samples = self.memo.get() & 0xFFFF_FFFF;
        let check_at = if samples < WARM_SAMPLES {
            0
        } else {
            let memo_due = now.as_nanos().saturating_add(s.bucket_width().as_nanos());
            let decay = self
                .period
                .get()
                .saturating_add(1)
                .saturating_mul(half_window.as_nanos());
            let expiry = self
                .last_sample
                .get()
                .saturating_sub(1)
                .saturating_add(half_window.saturating_mul(2).as_nanos());
            memo_due.min(decay).min(expiry)
        };
        self.check_at.swap(check_at);
    }

    /// What time alone has made due at `now`: forgets a baseline idle for a whole window (one
    /// that has had a sample: an empty one has nothing to forget) and decays the counts at each
    /// half-window boundary.
    #[inline(never)]
    fn catch_up(&self, now: Instant, half_window: Duration) {
        if self.last_sample.get() != 0 && self.expired(now, half_window) {
            self.clear();
        }
        // The next decay is due at the end of the current period (no division on the
        // common path).
        let current = self.period.get();
        let boundary = current
            .saturating_add(1)
            .saturating_mul(half_window.as_nanos());
        if now.as_nanos() >= boundary {
            let period = div_u64(now.as_nanos(), half_window.as_nanos()).unwrap_or(0);
            let (old, new) = self.period.update(|p| p.max(period));
            if new > old {
                let shift = u32::try_from(new.saturating_sub(old).min(16)).unwrap_or(16);
                self.halve(shift);
            }
        }
    }

    /// `true` once the baseline is stale at `now` (no sample for a whole window).
    fn expired(&self, now: Instant, half_window: Duration) -> bool {
        match self.last_sample.get() {
            0 => true,
            last => {
                now.as_nanos().saturating_sub(last.saturating_sub(1))
                    >= half_window.saturating_mul(2).as_nanos()
            }
        }
    }

    /// A bucket above `bucket`, drawn in proportion to the samples each holds, with `draw`
    /// uniform over `u64`; `None` when no sample lies above. A scan of the whole histogram:
    /// for the rare reader (a hedge that won), not per call.
    fn draw_above(&self, bucket: usize, draw: u64) -> Option<usize> {
        let above = bucket.saturating_add(1);
        let mut total: u64 = 0;
        let _ = self.scan_from(above, &mut |count| {
            total = total.saturating_add(count);
            false
        });
        let rank = draw.checked_rem(total)?;
        let mut seen: u64 = 0;
        self.scan_from(above, &mut |count| {
            seen = seen.saturating_add(count);
            seen > rank
        })
    }

    /// Hands `stop` the count (summed over the lanes) of each bucket from `first` up, lowest
    /// first, until it says stop: the bucket it stopped at, `None` if it never did.
    fn scan_from(&self, first: usize, stop: &mut dyn FnMut(u64) -> bool) -> Option<usize> {
        let written = self.counts.written();
        for wi in first / LANES..HIST_WORDS {
            for (i, count) in self.counts_at(wi, written).into_iter().enumerate() {
                let b = wi.saturating_mul(LANES).saturating_add(i);
                if b >= first && stop(count) {
                    return Some(b);
                }
            }
        }
        None
    }

    /// The memoized 95th percentile (read as its bucket's upper bound).
    fn p95(&self) -> Option<Duration> {
        self.tail
            .get()
            .checked_sub(1)
            .map(|b| Histogram::<W>::upper_bound(usize::try_from(b).unwrap_or(HIST_BUCKETS - 1)))
    }

    /// The memoized median (read as its bucket's upper bound) and sample count.
    fn reading(&self) -> (Option<Duration>, u32) {
        let memo = self.memo.get();
        let samples = u32::try_from(memo & 0xFFFF_FFFF).unwrap_or(u32::MAX);
        let bucket = memo >> 32;
        let median = bucket
            .checked_sub(1)
            .map(|b| Histogram::<W>::upper_bound(usize::try_from(b).unwrap_or(HIST_BUCKETS - 1)));
        (median, samples)
    }
}

/// Everything a full breaker measures. The counters every success writes (the trip window and
/// the latency histogram's counts) are kept in lanes: one in the single-threaded forms, one per
/// writing thread in the shared form ([`StripedStats`]), so that threads do not write the same
/// cache line on every call. A reading sums the lanes. Each lane's trip window is a whole
/// [`Ring`] of its own, rotated by its own writer, and each bucket one word: a sum over the
/// lanes adds every lane's bucket once, whole (never torn between its counts, never counted
/// in two lanes). A single thread writes one lane, so its readings, and every decision taken
/// on them, are those of the single-threaded form.
#[derive(Clone, Debug)]
pub(crate) struct Stats<W, T = One<Ring<W>>, C = One<HistCounts<W>>> {
    trip: T,
    errors: Ring<W>,
    latency: Histogram<W, C>,
}

/// The shared breaker's statistics in `N` cache-line-padded lanes.
pub(crate) type StripedStats<W, const N: usize> =
    Stats<W, Padded<Ring<W>, N>, Padded<HistCounts<W>, N>>;

impl<W: Word, const N: usize> StripedStats<W, N> {
    /// Sets the hint that picks a thread's lane.
    pub(crate) const fn set_lane_hint(&mut self, hint: LaneHint) {
        self.trip.set_hint(hint);
    }
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

impl<W: Word, T: Stripes<Item = Ring<W>>, C: Stripes<Item = HistCounts<W>>> Stats<W, T, C> {
    const_unless_loom! {
        pub(crate) fn new() -> Stats<W, T, C> {
            Stats { trip: stripes!(T), errors: Ring::new(), latency: Histogram::new() }
        }
    }

    /// Trip buckets that fit in one baseline window: how long an aged-out trip bucket still
    /// counts towards the baseline.
    fn keep(s: &BreakerSettings) -> u64 {
        div_u64(s.baseline_window().as_nanos(), s.bucket_width().as_nanos()).unwrap_or(0)
    }

    /// Records one outcome. The error baseline is fed what leaves the trip window (and the
    /// outcomes that never enter it), so a spike being judged has not yet moved the baseline
    /// it is judged against.
    pub(crate) fn record(&self, now: Instant, s: &BreakerSettings, sample: Sample) {
        let c = Counts {
            calls: u32::from(sample.counted),
            failures: u32::from(sample.counted && sample.failure),
            slow: u32::from(sample.counted && sample.slow),
        };
        let lane = self.trip.pick();
        if sample.to_window && sample.counted {
            self.to_window(now, s, c, lane);
        } else if c.calls > 0 {
            self.to_baseline(now, s, c);
        }
        if let Some(latency) = sample.baseline_latency {
            self.latency.record(now, s, half_baseline(s), latency, lane);
        }
    }

    /// [`Stats::record`] of a success that was not slow, granted and reported while closed in
    /// the same period: the common case, inlined into the breaker's call path.
    #[inline]
    pub(crate) fn record_fast_success(&self, now: Instant, s: &BreakerSettings, latency: Duration) {
        let lane = self.trip.pick();
        self.to_window(
            now,
            s,
            Counts {
                calls: 1,
                failures: 0,
                slow: 0,
            },
            lane,
        );
        self.latency.record(now, s, half_baseline(s), latency, lane);
    }

    /// Adds `c` to the trip window; the buckets that leave it, if still young enough, move into
    /// the error baseline.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    fn to_window(&self, now: Instant, s: &BreakerSettings, c: Counts, lane: usize) {
        self.trip.mark(lane);
        let Some(ring) = self.trip.at(lane) else {
            return;
        };
        let left = ring.record(now, s.bucket_width(), c, &|| Stats::<W>::keep(s));
        if left.calls > 0 {
            self.to_baseline(now, s, left);
        }
    }

    fn to_baseline(&self, now: Instant, s: &BreakerSettings, c: Counts) {
        // Baseline buckets that leave are older than the baseline window: dropped.
        let _ = self
            .errors
            .record(now, baseline_bucket(s), Counts { slow: 0, ..c }, &|| 0);
    }

    pub(crate) fn readings(&self, now: Instant, s: &BreakerSettings) -> Readings {
        let (mut window, mut aged_out) = (Counts::default(), Counts::default());
        let keep = Stats::<W>::keep(s);
        let written = self.trip.written();
        for k in 0..T::COUNT {
            match self.trip.at(k) {
                Some(ring) if written & lane_bit(k) != 0 => {
                    let (inside, outside) = ring.split(now, s.bucket_width(), keep);
                    window.add(inside);
                    aged_out.add(outside);
                }
                _ => {}
            }
        }
        let (mut base, _) = self.errors.split(now, baseline_bucket(s), 0);
        base.add(aged_out);
        Readings {
            window,
            baseline_calls: base.calls,
            baseline_failures: base.failures,
        }
    }

    /// The learned median latency of successful calls and the samples behind it (none once
    /// the baseline has gone a whole window without a sample).
    pub(crate) fn latency(&self, now: Instant, s: &BreakerSettings) -> (Option<Duration>, u32) {
        if self.latency.expired(now, half_baseline(s)) {
            return (None, 0);
        }
        self.latency.reading()
    }

    /// The learned 95th percentile of successful calls' latency, with the samples behind it
    /// (none once the baseline has gone a whole window without a sample).
    pub(crate) fn tail(&self, now: Instant, s: &BreakerSettings) -> (Option<Duration>, u32) {
        if self.latency.expired(now, half_baseline(s)) {
            return (None, 0);
        }
        (self.latency.p95(), self.latency.reading().1)
    }

    /// Where to learn an attempt known only to have run past `ran_past` (see
    /// [`Measure::censored`]).
    pub(crate) fn censored(
        &self,
        now: Instant,
        s: &BreakerSettings,
        ran_past: Duration,
        draw: u64,
    ) -> Duration {
        if self.latency.expired(now, half_baseline(s)) {
            return ran_past;
        }
        let bucket = Histogram::<W>::bucket(ran_past.as_nanos());
        self.latency.draw_above(bucket, draw).map_or(ran_past, |b| {
            Histogram::<W>::upper_bound(b).saturating_sub(Duration::from_nanos(1))
        })
    }

    /// How many learned healthy latencies lie at or above `threshold` (read by bucket: the
    /// threshold's own bucket counts as at or above, so the share errs high by up to an eighth
    /// of the threshold), of how many; `None` until `armed` samples are learned or once the
    /// baseline has gone a whole window without one. A scan of the whole histogram: for the
    /// ramp's slow calls, not per call.
    pub(crate) fn slow_share(
        &self,
        now: Instant,
        s: &BreakerSettings,
        threshold: Duration,
        armed: u32,
    ) -> Option<(u32, u32)> {
        if self.latency.expired(now, half_baseline(s)) {
            return None;
        }
        let first = Histogram::<W>::bucket(threshold.as_nanos());
        let (mut slow, mut total) = (0u64, 0u64);
        let _ = self.latency.scan_from(0, &mut |count| {
            total = total.saturating_add(count);
            false
        });
        let _ = self.latency.scan_from(first, &mut |count| {
            slow = slow.saturating_add(count);
            false
        });
        let total = u32::try_from(total).unwrap_or(u32::MAX);
        let slow = u32::try_from(slow).unwrap_or(u32::MAX).min(total);
        (total >= armed).then_some((slow, total))
    }

    /// The slow-call threshold in force at `now`: memoized with the median, one load.
    pub(crate) fn slow_threshold(&self, now: Instant, s: &BreakerSettings) -> Option<Duration> {
        if self.latency.expired(now, half_baseline(s)) {
            return slow_threshold(s, None, 0);
        }
        match self.latency.slow_at.get() {
            0 => slow_threshold(s, None, 0),
            at => Some(Duration::from_nanos(at.saturating_sub(1))),
        }
    }

    /// Clears the trip window (its counts were evidence for a decision now made) and folds
    /// into the error baseline what `fold` says measured the dependency as it normally is.
    pub(crate) fn clear_window(&self, now: Instant, s: &BreakerSettings, fold: Fold) {
        let mut held = Counts::default();
        for k in 0..T::COUNT {
            if let Some(ring) = self.trip.at(k) {
                held.add(ring.clear());
            }
        }
        let kept = match fold {
            Fold::All => held,
            Fold::AllBut(run) => {
                let run = u32::from(run);
                Counts {
                    calls: held.calls.saturating_sub(run),
                    failures: held.failures.saturating_sub(run),
                    slow: 0,
                }
            }
            Fold::Nothing => Counts::default(),
        };
        if kept.calls > 0 {
            self.to_baseline(now, s, kept);
        }
    }
}

/// What a decision leaves of the trip window for the error baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fold {
    /// After a close or a reset: the window measured the dependency as it normally is.
    All,
    /// After a trip by a run of this many failures: the run was the evidence, and the calls
    /// before it tripped nothing. Dropping them too would forget the last trip window of normal
    /// history at every outage, and a ramp or a probe after it would be judged cold.
    AllBut(u16),
    /// After a trip by the window's rates: the window was the evidence, picked for its
    /// failures; folding each such window in would raise the next trip point.
    Nothing,
}

/// What a breaker measures, as the breaker sees it: the full statistics, or nothing at all for a
/// breaker whose rules need none (the lean, consecutive-only form).
pub(crate) trait Measure {
    /// Whether this form keeps statistics at all: known at compile time, so a form without
    /// them links none of the rules that need them (the relative and absolute rates, slow
    /// calls, the recovery ramp).
    const KEEPS: bool;
    /// Where a refusal keeps the break it drew (see [`KeptBreak`](super::machine::KeptBreak)).
    #[cfg(all(target_pointer_width = "64", not(loom)))]
    type Kept: super::machine::KeptBreak;
    /// Records one outcome.
    fn record(&self, now: Instant, s: &BreakerSettings, sample: Sample);
    /// Records a success that was not slow, granted and reported while closed in the same
    /// period (see [`Stats::record_fast_success`]).
    fn record_fast_success(&self, now: Instant, s: &BreakerSettings, latency: Duration);
    /// The inputs of [`trip_reason`] at `now`.
    fn readings(&self, now: Instant, s: &BreakerSettings) -> Readings;
    /// The learned median latency and the samples behind it.
    fn latency(&self, now: Instant, s: &BreakerSettings) -> (Option<Duration>, u32);
    /// The learned 95th percentile and the samples behind it.
    fn tail(&self, now: Instant, s: &BreakerSettings) -> (Option<Duration>, u32);
    /// The slow-call threshold in force.
    fn slow_threshold(&self, now: Instant, s: &BreakerSettings) -> Option<Duration>;
    /// Where to learn an attempt known only to have run past `ran_past` (a first attempt a
    /// winning hedge left running): a latency drawn, with `draw` uniform over `u64`, from
    /// those learned above `ran_past`'s bucket, in proportion to how often each came, or
    /// `ran_past` itself when none lies above (or nothing is learned).
    fn censored(
        &self,
        now: Instant,
        s: &BreakerSettings,
        ran_past: Duration,
        draw: u64,
    ) -> Duration;
    /// How many learned healthy latencies lie at or above `threshold`, of how many, once
    /// `armed` are learned (see [`Stats::slow_share`]).
    fn slow_share(
        &self,
        now: Instant,
        s: &BreakerSettings,
        threshold: Duration,
        armed: u32,
    ) -> Option<(u32, u32)>;
    /// Empties the trip window, folding what `fold` says into the error baseline.
    fn clear_window(&self, now: Instant, s: &BreakerSettings, fold: Fold);
}

impl<W: Word, T: Stripes<Item = Ring<W>>, C: Stripes<Item = HistCounts<W>>> Measure
    for Stats<W, T, C>
{
    const KEEPS: bool = true;
    #[cfg(all(target_pointer_width = "64", not(loom)))]
    type Kept = super::machine::DrawnBreak<W>;
    fn record(&self, now: Instant, s: &BreakerSettings, sample: Sample) {
        Stats::record(self, now, s, sample);
    }
    #[inline]
    fn record_fast_success(&self, now: Instant, s: &BreakerSettings, latency: Duration) {
        Stats::record_fast_success(self, now, s, latency);
    }
    fn readings(&self, now: Instant, s: &BreakerSettings) -> Readings {
        Stats::readings(self, now, s)
    }
    fn latency(&self, now: Instant, s: &BreakerSettings) -> (Option<Duration>, u32) {
        Stats::latency(self, now, s)
    }
    fn tail(&self, now: Instant, s: &BreakerSettings) -> (Option<Duration>, u32) {
        Stats::tail(self, now, s)
    }
    fn slow_threshold(&self, now: Instant, s: &BreakerSettings) -> Option<Duration> {
        Stats::slow_threshold(self, now, s)
    }
    fn censored(
        &self,
        now: Instant,
        s: &BreakerSettings,
        ran_past: Duration,
        draw: u64,
    ) -> Duration {
        Stats::censored(self, now, s, ran_past, draw)
    }
    fn slow_share(
        &self,
        now: Instant,
        s: &BreakerSettings,
        threshold: Duration,
        armed: u32,
    ) -> Option<(u32, u32)> {
        Stats::slow_share(self, now, s, threshold, armed)
    }
    fn clear_window(&self, now: Instant, s: &BreakerSettings, fold: Fold) {
        Stats::clear_window(self, now, s, fold);
    }
}

/// No statistics: for settings whose rules need none ([`BreakerSettings::keeps_statistics`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoStats;

impl Measure for NoStats {
    const KEEPS: bool = false;
    #[cfg(all(target_pointer_width = "64", not(loom)))]
    type Kept = ();
    fn record(&self, _: Instant, _: &BreakerSettings, _: Sample) {}
    fn record_fast_success(&self, _: Instant, _: &BreakerSettings, _: Duration) {}
    fn readings(&self, _: Instant, _: &BreakerSettings) -> Readings {
        Readings::default()
    }
    fn latency(&self, _: Instant, _: &BreakerSettings) -> (Option<Duration>, u32) {
        (None, 0)
    }
    fn tail(&self, _: Instant, _: &BreakerSettings) -> (Option<Duration>, u32) {
        (None, 0)
    }
    fn slow_threshold(&self, _: Instant, s: &BreakerSettings) -> Option<Duration> {
        slow_threshold(s, None, 0)
    }
    fn censored(&self, _: Instant, _: &BreakerSettings, ran_past: Duration, _: u64) -> Duration {
        ran_past
    }
    fn slow_share(
        &self,
        _: Instant,
        _: &BreakerSettings,
        _: Duration,
        _: u32,
    ) -> Option<(u32, u32)> {
        None
    }
    fn clear_window(&self, _: Instant, _: &BreakerSettings, _: Fold) {}
}

fn baseline_bucket(s: &BreakerSettings) -> Duration {
    div_rem_u32(s.baseline_window().as_nanos(), TRIP_BUCKETS as u32)
        .map_or(Duration::ZERO, |(tenth, _)| Duration::from_nanos(tenth))
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

/// `true` when the window's failure rate has reached half the trip point of the rate rules in
/// force, once the window holds its minimum calls: hedging stops adding load there.
pub(crate) fn near_trip(r: &Readings, s: &BreakerSettings) -> bool {
    let w = r.window;
    // The trip window's minimum calls, as the trip rules themselves need: one failure in three
    // calls is not a dependency nearing its trip point.
    if w.calls < s.minimum_calls() || w.failures == 0 {
        return false;
    }
    let (failures, calls) = (u64::from(w.failures), u64::from(w.calls));
    // failures / calls >= point / 2, with the point as a fraction in ppm.
    let reached_half = |point_ppm: u64| {
        u128::from(failures).saturating_mul(2_000_000)
            >= u128::from(calls).saturating_mul(u128::from(point_ppm))
    };
    if let Some(ceiling) = s.failure_ratio() {
        if reached_half(u64::from(ceiling.ppm())) {
            return true;
        }
    }
    if let Some(rule) = s.failure_rate() {
        if r.baseline_calls >= rule.arming_outcomes() && r.baseline_calls > 0 {
            let base_ppm = div_rem_u32(
                u64::from(r.baseline_failures).saturating_mul(1_000_000),
                r.baseline_calls,
            )
            .map_or(0, |(q, _)| q);
            let relative = div_rem_u32(
                base_ppm.saturating_mul(u64::from(rule.multiple().milli())),
                1000,
            )
            .map_or(0, |(q, _)| q);
            let point = relative
                .min(u64::from(crate::ratio::PPM))
                .max(u64::from(rule.floor().ppm()));
            if reached_half(point) {
                return true;
            }
        }
    }
    false
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
    // The relative rule's trip point: max(floor, min(multiple x baseline, 100%)), lowered by the
    // absolute ceiling when one is set ("a measurement may tighten a constant, never loosen
    // one"). Every comparison is inclusive: a window at the trip point trips.
    if let Some(ceiling) = s.failure_ratio() {
        if ceiling.reached_by(failures, calls) {
            return Some(TripReason::FailureRatio);
        }
    }
    if let Some(rule) = s.failure_rate() {
        let armed = r.baseline_calls >= rule.arming_outcomes();
        if armed && w.failures >= rule.min_failures() && rule.floor().reached_by(failures, calls) {
            // failures/calls >= min(multiple * base_failures/base_calls, 1), exactly:
            // failures * base_calls * 1000 >= min(multiple_milli * base_failures,
            //                                      1000 * base_calls) * calls
            let lhs = u128::from(failures)
                .saturating_mul(u128::from(r.baseline_calls))
                .saturating_mul(1000);
            let point = u128::from(rule.multiple().milli())
                .saturating_mul(u128::from(r.baseline_failures))
                .min(u128::from(r.baseline_calls).saturating_mul(1000));
            if lhs >= point.saturating_mul(u128::from(calls)) {
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

/// Outcomes the learned failure rate needs before the noise rules trust it, when the relative
/// error-rate rule (whose arming count is used otherwise) is off.
const FAILURE_RATE_ARMING: u32 = 100;

/// The dependency's normal failure rate as the noise rules read it, `(failures, outcomes)`: every
/// counted outcome the breaker still remembers (its trip window and its error baseline), less
/// `leave_out` (the failures and outcomes being judged, so that the evidence does not vouch for
/// itself). `None` until armed: fewer outcomes than the error-rate rule's arming count (100 by
/// default) say nothing about what is normal.
pub(crate) fn learned_failure_rate(
    r: &Readings,
    s: &BreakerSettings,
    leave_out: (u32, u32),
) -> Option<(u32, u32)> {
    let (leave_failures, leave_calls) = leave_out;
    let calls = r
        .window
        .calls
        .saturating_add(r.baseline_calls)
        .saturating_sub(leave_calls);
    let failures = r
        .window
        .failures
        .saturating_add(r.baseline_failures)
        .saturating_sub(leave_failures)
        .min(calls);
    let arming = s
        .failure_rate()
        .map_or(FAILURE_RATE_ARMING, |rule| rule.arming_outcomes())
        .max(1);
    (calls >= arming).then_some((failures, calls))
}

/// `log2(x)` in fixed point with 16 fractional bits (0 for `x` of 0 or 1), in integer
/// arithmetic: the whole part from the leading zeros, the fraction by squaring the mantissa
/// once a bit. Accurate to within 2^-15; no division, so it costs a few dozen instructions on a
/// microcontroller.
fn log2_q16(x: u64) -> u64 {
    let Some(whole) = 63u32.checked_sub(x.leading_zeros()) else {
        return 0;
    };
    // The mantissa in [2^31, 2^32): x scaled to 32 significant bits.
    let mut m = match whole.checked_sub(31) {
        Some(over) => x >> over,
        None => x << 31u32.saturating_sub(whole),
    };
    let mut fraction = 0u64;
    for bit in (0..16u32).rev() {
        // m < 2^32, so m * m < 2^64.
        m = m.saturating_mul(m) >> 31;
        if m >= 1 << 32 {
            m >>= 1;
            fraction |= 1 << bit;
        }
    }
    (u64::from(whole) << 16) | fraction
}

/// The evidence, in bits (fixed point, 16 fractional bits), that `k` failures among `n`
/// outcomes are more than a normal failure rate of `f / c` explains: `n` times the relative
/// entropy of the observed rate `k / n` against `f / c`, when the observed rate is the higher
/// (zero otherwise). The chance of `k` or more failures under `f / c` is at most 2 to the minus
/// this many (the Chernoff bound), so evidence of `log2(one_in)` bits or more puts the failures
/// beyond the noise bound. `n`, `k` below 2^16 and `c` below 2^32 keep every product in 64
/// bits.
fn evidence_bits(n: u64, k: u64, f: u64, c: u64) -> u64 {
    let (Some(misses), Some(g)) = (n.checked_sub(k), c.checked_sub(f)) else {
        return 0;
    };
    // The observed rate at or below the normal one is no evidence: k * c <= n * f.
    if k.saturating_mul(c) <= n.saturating_mul(f) {
        return 0;
    }
    // Logs of 64-bit values are below 2^22 in this fixed point, so with counts below 2^16 each
    // term is below 2^38.
    let log = |x: u64| i64::try_from(log2_q16(x)).unwrap_or(i64::MAX);
    let count = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    // k log2((k/n) / p) + (n - k) log2(((n-k)/n) / (1 - p)), with p = f / c.
    let hits =
        count(k).saturating_mul(log(k.saturating_mul(c)).saturating_sub(log(n.saturating_mul(f))));
    let rest = if misses == 0 {
        0
    } else {
        count(misses)
            .saturating_mul(log(misses.saturating_mul(c)).saturating_sub(log(n.saturating_mul(g))))
    };
    u64::try_from(hits.saturating_add(rest)).unwrap_or(0)
}

/// The run of failures that trips the consecutive rule: the configured count on a cold breaker
/// (`learned` is `None`); once the normal failure rate `p = f / c` is learned, the shortest run
/// `n` with `p^n <= 1 / one_in`, never below the configured count and at most [`MAX_COUNT`].
pub(crate) fn run_needed(configured: u16, learned: Option<(u32, u32)>, one_in: u64) -> u16 {
    let Some((f, c)) = learned else {
        return configured;
    };
    if f == 0 || c == 0 {
        return configured;
    }
    if f >= c {
        return MAX_COUNT;
    }
    // A run of n failures is n log2(1/p) bits of evidence: n >= log2(one_in) / log2(1/p).
    // Both logs are below 2^22, so the division is a 32-bit one (a 64-bit division is a library
    // routine on a microcontroller).
    let bits = |x: u64| u32::try_from(log2_q16(x)).unwrap_or(u32::MAX);
    let per_failure = bits(u64::from(c)).saturating_sub(bits(u64::from(f)));
    let needed = bits(one_in)
        .div_ceil(per_failure.max(1))
        .min(u32::from(MAX_COUNT));
    u16::try_from(needed).unwrap_or(MAX_COUNT).max(configured)
}

/// Whether `k` failures among `n` outcomes are beyond what a normal failure rate of `f / c`
/// explains within the noise bound: the chance of that many or more under it is at most
/// `1 / one_in` by the Chernoff bound (see [`evidence_bits`]), which asks for slightly more
/// failures than the exact binomial tail and never fewer. With a normal rate of zero, one
/// failure is beyond it; with `k` at or below the expected count, nothing is.
pub(crate) fn beyond_noise(n: u32, k: u32, f: u32, c: u32, one_in: u64) -> bool {
    if k == 0 {
        return false;
    }
    // More failures than outcomes cannot happen by chance; nor can any under a rate of zero.
    if k > n || f == 0 || c == 0 {
        return true;
    }
    if f >= c {
        return false;
    }
    // Below 2^16 outcomes every product stays within 64 bits; the ramp counts fewer.
    let (mut n, mut k) = (u64::from(n), u64::from(k));
    while n >= 1 << 16 {
        (n, k) = (n / 2, k / 2);
    }
    evidence_bits(n, k, u64::from(f), u64::from(c)) >= log2_q16(one_in)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    type Local = Cell<u64>;

    const S: BreakerSettings = BreakerSettings::defaults("stats");

    #[test]
    fn the_latency_histogram_reads_within_an_eighth_above_never_below() {
        let mut v: u64 = 1024;
        while v < (1u64 << 40) {
            let read = Histogram::<Local>::upper_bound(Histogram::<Local>::bucket(v)).as_nanos();
            assert!(read > v, "{v} read as {read}");
            assert!(
                read * 8 <= v * 9,
                "{v} read as {read}: more than 12.5% above"
            );
            v = v + v / 7 + 1;
        }
        // Outside the resolved range, the range's ends: below it still never below the truth,
        // above it the top bucket's bound.
        let read = |v: u64| Histogram::<Local>::upper_bound(Histogram::<Local>::bucket(v));
        assert_eq!(read(3).as_nanos(), 1152);
        assert_eq!(read(1023).as_nanos(), 1152);
        assert_eq!(read(1 << 41).as_nanos(), 1 << 40);
        assert_eq!(read(u64::MAX).as_nanos(), 1 << 40);
    }

    #[test]
    fn the_median_is_the_middle_sample() {
        let h = Histogram::<Local>::new();
        let half = Duration::from_secs(150);
        let now = Instant::from_secs(1);
        for ms in [10u64, 20, 30, 40, 50] {
            h.record(now, &S, half, Duration::from_millis(ms), 0);
        }
        let (m, n) = h.reading();
        let m = m.unwrap();
        assert_eq!(n, 5);
        assert!(m > Duration::from_millis(30) && m <= Duration::from_micros(33_750));
    }

    #[test]
    fn the_ring_forgets_buckets_older_than_the_window() {
        let r = Ring::<Local>::new();
        let w = Duration::from_secs(3);
        let c = Counts {
            calls: 1,
            failures: 1,
            slow: 0,
        };
        let _ = r.record(Instant::from_secs(0), w, c, &|| 100);
        let _ = r.record(Instant::from_secs(10), w, c, &|| 100);
        let inside = |t: u64| r.split(Instant::from_secs(t), w, 100).0.calls;
        assert_eq!(inside(10), 2);
        assert_eq!(inside(29), 2);
        assert_eq!(inside(30), 1);
        assert_eq!(inside(40), 0);
        assert_eq!(
            r.split(Instant::from_secs(40), w, 100).1.calls,
            2,
            "aged out, not yet replaced"
        );
        assert_eq!(
            r.split(Instant::from_secs(40), w, 5).1.calls,
            0,
            "too old for the baseline"
        );
        // Bucket 33 moves the head past buckets 0 and 3 (ages 33 and 30): both leave, and
        // only those young enough are handed back.
        let twin = r.clone();
        assert_eq!(r.record(Instant::from_secs(100), w, c, &|| 40).calls, 2);
        assert_eq!(twin.record(Instant::from_secs(100), w, c, &|| 31).calls, 1);
        assert_eq!(
            r.split(Instant::from_secs(100), w, 100),
            (c, Counts::default())
        );
    }

    #[test]
    fn moving_the_head_empties_only_the_buckets_that_leave_the_window() {
        let r = Ring::<Local>::new();
        let w = Duration::from_secs(1);
        let one = Counts {
            calls: 1,
            failures: 0,
            slow: 0,
        };
        for second in 0..6 {
            let _ = r.record(Instant::from_secs(second), w, one, &|| 100);
        }
        // Bucket 12: buckets 0, 1 and 2 leave (12 - 10 = 2); 3, 4 and 5 stay.
        let left = r.record(Instant::from_secs(12), w, one, &|| 100);
        assert_eq!(left.calls, 3);
        let (inside, _) = r.split(Instant::from_secs(12), w, 100);
        assert_eq!(inside.calls, 4, "buckets 3, 4, 5 and 12");
        // A clock stepping back inside the window adds to its own bucket; past it, to the
        // newest: no time passed.
        let _ = r.record(Instant::from_secs(4), w, one, &|| 100);
        let _ = r.record(Instant::from_secs(1), w, one, &|| 100);
        assert_eq!(r.split(Instant::from_secs(12), w, 100).0.calls, 6);
        assert_eq!(
            r.split(Instant::from_secs(14), w, 100).0.calls,
            3,
            "bucket 5, and bucket 12 with the sample from second 1"
        );
    }

    #[test]
    fn a_full_bucket_halves_its_counts_together_keeping_their_ratios() {
        let big = Counts {
            calls: 6_000_000,
            failures: 600_000,
            slow: 30,
        };
        // 6 M calls is past 2^21: halved twice, every count with it.
        assert_eq!(
            Counts::unpack(big.pack()),
            Counts {
                calls: 1_500_000,
                failures: 150_000,
                slow: 7
            }
        );
        let below = Counts {
            calls: (1 << (CALL_BITS - 1)) - 1,
            failures: 5,
            slow: 7,
        };
        assert_eq!(Counts::unpack(below.pack()), below, "kept as it is");
    }

    #[test]
    fn a_bucket_past_millions_of_calls_keeps_its_failure_ratio() {
        let r = Ring::<Local>::new();
        let w = Duration::from_secs(3);
        let now = Instant::from_secs(1);
        // 10 million calls in one bucket, 30% of them failures.
        for _ in 0..10 {
            let _ = r.record(
                now,
                w,
                Counts {
                    calls: 1_000_000,
                    failures: 300_000,
                    slow: 0,
                },
                &|| 0,
            );
        }
        let read = r.split(now, w, 0).0;
        let ppm = u64::from(read.failures) * 1_000_000 / u64::from(read.calls);
        assert!(
            (299_000..=301_000).contains(&ppm),
            "read {read:?}: {ppm} ppm failing, not 30%"
        );
        assert!(read.calls >= 1_000_000, "still far above any minimum");
    }

    #[test]
    fn one_outcome_at_a_time_reaches_the_top_bit_and_halves_the_bucket() {
        let r = Ring::<Local>::new();
        let w = Duration::from_secs(3);
        let now = Instant::from_secs(1);
        let fail = Counts {
            calls: 1,
            failures: 1,
            slow: 0,
        };
        let ok = Counts {
            calls: 1,
            failures: 0,
            slow: 0,
        };
        // Just below the top bit of the calls, a quarter of them failures.
        let start = Counts {
            calls: (1 << (CALL_BITS - 1)) - 4,
            failures: (1 << (CALL_BITS - 3)) - 1,
            slow: 0,
        };
        let _ = r.record(now, w, start, &|| 0);
        for c in [ok, ok, ok, fail] {
            let _ = r.record(now, w, c, &|| 0);
        }
        let read = r.split(now, w, 0).0;
        assert_eq!(read.calls, 1 << (CALL_BITS - 2), "halved on reaching 2^21");
        assert_eq!(
            read.failures,
            1 << (CALL_BITS - 4),
            "and the failures with it"
        );
    }

    #[test]
    fn packed_addition_matches_the_fitted_sum() {
        let edge = |bits: u32| [0, 1, (1 << (bits - 1)) - 2, (1 << (bits - 1)) - 1];
        for calls in edge(CALL_BITS) {
            for failures in edge(FAIL_BITS) {
                for slow in edge(SLOW_BITS) {
                    let w = Counts {
                        calls,
                        failures,
                        slow,
                    };
                    for inc in [
                        Counts {
                            calls: 1,
                            failures: 0,
                            slow: 0,
                        },
                        Counts {
                            calls: 1,
                            failures: 1,
                            slow: 1,
                        },
                        Counts {
                            calls: 3_000_000,
                            failures: 5,
                            slow: 2_000_000,
                        },
                    ] {
                        // `inc` is stored fitted too before it is added.
                        let mut sum = w;
                        sum.add(Counts::unpack(inc.pack()));
                        let fitted = sum.fit();
                        assert_eq!(
                            Counts::unpack(Counts::add_packed(w.pack(), inc.pack())),
                            fitted,
                            "{w:?} + {inc:?}"
                        );
                        assert!(fitted.calls < 1 << (CALL_BITS - 1));
                        assert!(fitted.failures < 1 << (FAIL_BITS - 1));
                        assert!(fitted.slow < 1 << (SLOW_BITS - 1));
                    }
                }
            }
        }
    }

    #[test]
    fn the_latency_baseline_decays_and_expires_when_idle() {
        let h = Histogram::<Local>::new();
        let half = Duration::from_secs(150);
        for i in 0..300 {
            h.record(
                Instant::from_millis(i),
                &S,
                half,
                Duration::from_millis(20),
                0,
            );
        }
        assert_eq!(
            h.reading().1,
            256,
            "re-read on every sample up to 64, then when the bucket's count passes 256"
        );
        h.record(
            Instant::from_secs(151),
            &S,
            half,
            Duration::from_millis(20),
            0,
        );
        assert_eq!(h.reading().1, 151, "halved, then one more");
        assert!(h.expired(Instant::from_secs(452), half));
        assert!(!h.expired(Instant::from_secs(450), half));
    }

    /// P(X >= k) for X ~ Binomial(n, p), summed in floating point from the pmf's recursion.
    fn tail(n: u32, k: u32, p: f64) -> f64 {
        let mut pmf = 1.0;
        for _ in 0..n {
            pmf *= 1.0 - p;
        }
        let mut sum = 0.0;
        for i in 0..=n {
            if i >= k {
                sum += pmf;
            }
            pmf *= f64::from(n - i) / f64::from(i + 1) * p / (1.0 - p);
        }
        sum
    }

    #[test]
    fn a_run_trips_once_its_chance_under_the_learned_rate_is_within_the_bound() {
        let bound = 100_000_000;
        assert_eq!(run_needed(5, None, bound), 5, "cold: the configured count");
        assert_eq!(run_needed(5, Some((0, 100)), bound), 5);
        assert_eq!(run_needed(5, Some((1, 5)), bound), 12);
        assert_eq!(run_needed(5, Some((1, 20)), bound), 7);
        assert_eq!(run_needed(5, Some((1, 100)), bound), 5, "0.01^4 = 1e-8");
        assert_eq!(run_needed(2, Some((1, 1000)), bound), 3, "0.001^3 = 1e-9");
        assert_eq!(run_needed(3, Some((1, 50)), bound), 5, "0.02^5 = 3.2e-9");
        assert_eq!(run_needed(5, Some((3, 10)), bound), 16);
        assert_eq!(run_needed(5, Some((100, 100)), bound), MAX_COUNT);
        assert_eq!(
            run_needed(5, Some((999_999, 1_000_000)), 1 << 40),
            MAX_COUNT
        );
    }

    #[test]
    fn beyond_noise_never_calls_noise_beyond_and_asks_for_little_more_than_the_exact_tail() {
        let bound = 100_000_000u64;
        let limit = 1.0 / bound as f64;
        let mut checked = 0;
        for (f, c) in [(1u32, 20u32), (1, 5), (3, 10), (1, 1000), (1, 2)] {
            let p = f64::from(f) / f64::from(c);
            // Under miri (which runs the unit tests in CI) the short runs only.
            let sizes: &[u32] = if cfg!(miri) {
                &[1, 5, 20]
            } else {
                &[1, 5, 20, 60, 200, 400]
            };
            for &n in sizes {
                // The exact threshold: the fewest failures whose tail is within the bound.
                let exact = (0..=n).find(|&k| tail(n, k, p) <= limit);
                let ours = (0..=n).find(|&k| beyond_noise(n, k, f, c, bound));
                for k in 0..=n {
                    if beyond_noise(n, k, f, c, bound) {
                        // Sound: what it calls beyond, the exact tail does too (with a hair of
                        // room for the fixed point's rounding).
                        assert!(tail(n, k, p) <= limit * 1.001, "n {n}, k {k}, p {p}");
                    }
                    checked += 1;
                }
                match (exact, ours) {
                    (Some(e), Some(o)) => assert!(
                        o >= e && o <= e + 2 + e / 4,
                        "n {n}, p {p}: {o} failures against the exact {e}"
                    ),
                    (None, None) => {}
                    (Some(e), None) => assert!(
                        e + 2 + e / 4 > n,
                        "n {n}, p {p}: the exact tail is beyond at {e}, this never"
                    ),
                    (None, Some(o)) => panic!("n {n}, p {p}: beyond at {o}, the exact never"),
                }
            }
        }
        assert!(checked > if cfg!(miri) { 100 } else { 3000 });
        // The ends: a rate of zero explains no failure, a rate of one every failure.
        assert!(beyond_noise(50, 1, 0, 100, bound));
        assert!(!beyond_noise(50, 50, 100, 100, bound));
        assert!(!beyond_noise(50, 0, 1, 2, bound));
        assert!(beyond_noise(u32::MAX, u32::MAX, 1, 2, bound));
        assert!(!beyond_noise(u32::MAX, 0, 1, 2, bound));
    }

    #[test]
    fn the_fixed_point_log_is_within_its_resolution() {
        assert_eq!(log2_q16(0), 0);
        assert_eq!(log2_q16(1), 0);
        assert_eq!(log2_q16(2), 1 << 16);
        assert_eq!(log2_q16(1 << 40), 40 << 16);
        let mut x = 3u64;
        while x < u64::MAX / 3 {
            let want = (x as f64).log2() * 65536.0;
            let got = log2_q16(x) as f64;
            assert!((got - want).abs() <= 2.0, "{x}: {got} against {want}");
            x = x * 3 + 1;
        }
    }
}

/// Model checks of the ring's rotation under every interleaving loom explores, run with the
/// other loom models: `RUSTFLAGS="--cfg loom" cargo test --release -p stormguard-core --lib
/// breaker::stats::loom_models`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::AtomicU64;
    use loom::sync::Arc;

    const ONE: Counts = Counts {
        calls: 1,
        failures: 0,
        slow: 0,
    };

    /// Two outcomes racing into a new bucket, one of them moving the head on: each ends in the
    /// window, or is handed back with the bucket whose slot it raced for (young enough here to
    /// go on to the baseline). None is lost.
    #[test]
    fn outcomes_racing_a_rotation_are_all_accounted_for() {
        loom::model(|| {
            let width = Duration::from_secs(1);
            let ring = Arc::new(Ring::<AtomicU64>::new());
            // Bucket 11 fills the slot bucket 21 will take; bucket 20 is the head.
            let _ = ring.record(Instant::from_secs(11), width, ONE, &|| 100);
            let _ = ring.record(Instant::from_secs(20), width, ONE, &|| 100);
            let racer = || {
                let ring = ring.clone();
                loom::thread::spawn(move || {
                    ring.record(Instant::from_secs(21), width, ONE, &|| 100)
                        .calls
                })
            };
            let (a, b) = (racer(), racer());
            let left = a.join().unwrap_or(0) + b.join().unwrap_or(0);
            let inside = ring.split(Instant::from_secs(21), width, 100).0.calls;
            assert_eq!(inside + left, 4, "inside {inside}, handed back {left}");
            assert!(left >= 1, "bucket 11 left the window and was handed back");
        });
    }

    /// Two threads, each writing its own lane of a striped window, while a third reads the
    /// trip decision's inputs: every reading is a sum of whole buckets (each outcome a failure,
    /// so failures always equal calls: no bucket read torn between its counts) counting each
    /// outcome at most once, and once both are done the reading holds both, once.
    #[test]
    fn a_reading_sums_whole_lanes_and_counts_each_outcome_once() {
        loom::model(|| {
            let s = BreakerSettings::defaults("loom");
            let stats = Arc::new(StripedStats::<AtomicU64, 2>::new());
            let now = Instant::from_secs(100);
            let fail = Counts {
                calls: 1,
                failures: 1,
                slow: 0,
            };
            let writer = |lane: usize| {
                let stats = stats.clone();
                loom::thread::spawn(move || stats.to_window(now, &s, fail, lane))
            };
            let writers = [writer(0), writer(1)];
            let r = stats.readings(now, &s);
            assert!(r.window.calls <= 2, "counted twice: {r:?}");
            assert_eq!(r.window.failures, r.window.calls, "torn: {r:?}");
            for w in writers {
                w.join().unwrap_or(());
            }
            let r = stats.readings(now, &s);
            assert_eq!((r.window.calls, r.window.failures), (2, 2), "{r:?}");
        });
    }
}
