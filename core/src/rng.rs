//! The seeded generator jitter is drawn from: PCG-XSH-RR (a 64-bit linear congruential state,
//! 32-bit output permuted by a state-dependent rotation).
//!
//! Why not a general-purpose crate: the core draws only jitter, and on a 32-bit microcontroller a
//! generator with a 64-bit output costs a 64x64-bit multiply and a 64-bit modulo per range, about
//! 1.5 KB of flash. PCG's step is one 64-bit multiply-add (a few instructions on a Cortex-M3 and
//! up), its output a 32-bit word, and ranges are mapped by multiplication, never by division.
//! The same seed gives the same draws on every target.

/// The LCG multiplier of PCG's 64-bit state.
const MULTIPLIER: u64 = 6_364_136_223_846_793_005;
/// The LCG increment (any odd constant gives a full-period stream).
const INCREMENT: u64 = 1_442_695_040_888_963_407;

/// A small, seeded, deterministic random number generator for jitter (8 bytes).
///
/// ```
/// use stormguard_core::rng::JitterRng;
///
/// let mut a = JitterRng::with_seed(42);
/// let mut b = JitterRng::with_seed(42);
/// assert_eq!(a.next_u32(), b.next_u32()); // the same seed, the same draws
/// let d = a.up_to(1_000);
/// assert!(d <= 1_000);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct JitterRng {
    state: u64,
}

impl JitterRng {
    /// A generator seeded with `seed`. Nearby seeds (0, 1, 2, ...) give unrelated streams: the
    /// seed is mixed (SplitMix64's finalizer) before it becomes the state.
    #[must_use]
    // A few 64-bit multiplies: one copy on a microcontroller's flash; inlined where it is cheap.
    #[cfg_attr(target_pointer_width = "64", inline)]
    #[cfg_attr(not(target_pointer_width = "64"), inline(never))]
    pub const fn with_seed(seed: u64) -> JitterRng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        JitterRng {
            state: z.wrapping_add(INCREMENT),
        }
    }

    /// A seed held as it is, for [`JitterRng::mixed`] to turn into [`JitterRng::with_seed`]'s
    /// generator later: a call that never draws never pays for the mixing.
    #[cfg(target_pointer_width = "64")]
    pub(crate) const fn unmixed(seed: u64) -> JitterRng {
        JitterRng { state: seed }
    }

    /// The generator [`JitterRng::with_seed`] makes of a seed held by [`JitterRng::unmixed`].
    #[cfg(target_pointer_width = "64")]
    pub(crate) const fn mixed(&self) -> JitterRng {
        JitterRng::with_seed(self.state)
    }

    /// The next 32 random bits.
    #[cfg_attr(target_pointer_width = "64", inline)]
    #[cfg_attr(not(target_pointer_width = "64"), inline(never))]
    pub fn next_u32(&mut self) -> u32 {
        let old = self.state;
        self.state = old.wrapping_mul(MULTIPLIER).wrapping_add(INCREMENT);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        let rotation = (old >> 59) as u32;
        xorshifted.rotate_right(rotation)
    }

    /// The next 64 random bits (two draws).
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let high = u64::from(self.next_u32());
        (high << 32) | u64::from(self.next_u32())
    }

    /// A number in `[0, n]`, inclusive, uniform to within one part in 2^32 of `n`: the span is
    /// scaled by a 32-bit fraction (`(n + 1) x r / 2^32`), in 32x32-bit multiplies.
    #[inline]
    pub fn up_to(&mut self, n: u64) -> u64 {
        let r = u64::from(self.next_u32());
        let Some(span) = n.checked_add(1) else {
            // The whole u64 range.
            return self.next_u64_with(r);
        };
        // floor(span x r / 2^32), without a 96-bit product: split span in 32-bit halves.
        let high = (span >> 32).wrapping_mul(r);
        let low = (span & u64::from(u32::MAX)).wrapping_mul(r) >> 32;
        high.wrapping_add(low).min(n)
    }

    fn next_u64_with(&mut self, high: u64) -> u64 {
        (high << 32) | u64::from(self.next_u32())
    }
}

impl Default for JitterRng {
    /// Seeded with 0.
    fn default() -> Self {
        JitterRng::with_seed(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_cover_the_range_evenly_and_stay_inside_it() {
        let mut rng = JitterRng::with_seed(1);
        let mut buckets = [0u32; 10];
        // Fewer draws under miri, which interprets every step. Per bucket, the binomial's
        // standard deviation (sqrt(n p (1 - p))) is about 95 of 100 000 draws' 10 000
        // expected, and 30 of 10 000 draws' 1 000: both bounds are some 5.3 of them.
        let (draws, within) = if cfg!(miri) {
            (10_000, 160)
        } else {
            (100_000, 500)
        };
        for _ in 0..draws {
            let x = rng.up_to(9);
            assert!(x <= 9);
            buckets[x as usize] += 1;
        }
        let expected = draws / 10;
        for b in buckets {
            assert!(b.abs_diff(expected) <= within, "{buckets:?}");
        }
        for n in [0, 1, u64::from(u32::MAX), 1 << 40, u64::MAX - 1, u64::MAX] {
            for _ in 0..if cfg!(miri) { 100 } else { 1000 } {
                assert!(rng.up_to(n) <= n);
            }
        }
        assert_eq!(JitterRng::with_seed(3).up_to(0), 0);
    }

    #[test]
    fn large_spans_reach_their_top_half() {
        let mut rng = JitterRng::with_seed(9);
        let n = 30_000_000_000u64; // a 30 s cap in nanoseconds
        let above = (0..1000).filter(|_| rng.up_to(n) > n / 2).count();
        assert!((400..=600).contains(&above), "{above}");
    }

    #[test]
    fn nearby_seeds_give_unrelated_streams() {
        let a: [u32; 4] = core::array::from_fn({
            let mut r = JitterRng::with_seed(0);
            move |_| r.next_u32()
        });
        let b: [u32; 4] = core::array::from_fn({
            let mut r = JitterRng::with_seed(1);
            move |_| r.next_u32()
        });
        assert!(a.iter().zip(&b).all(|(x, y)| x != y));
    }
}
