//! Seeded randomness with platform-independent maths.
//!
//! Every draw starts from a `fastrand::Rng` with an explicit seed, and every transcendental
//! function goes through `libm` (a pure-Rust port of musl's), never the platform's maths
//! library, so the same seed gives the same numbers, bit for bit, on any machine.

use stormguard_core::Duration;

/// One step of SplitMix64: a good way to turn one seed into many independent ones.
#[must_use]
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed for one stream (`a`, `b` name it: client, layer, purpose) derived from the run's seed.
#[must_use]
pub fn derive(seed: u64, a: u64, b: u64) -> u64 {
    splitmix64(splitmix64(splitmix64(seed) ^ a.wrapping_mul(0xA24B_AED4_963E_E407)) ^ b)
}

/// A uniform draw in the open interval (0, 1): 53 random bits, never exactly 0 or 1.
pub fn open01(rng: &mut fastrand::Rng) -> f64 {
    let bits = rng.u64(..) >> 11;
    // (bits + 0.5) / 2^53: exact in f64.
    (bits as f64 + 0.5) * (1.0 / 9_007_199_254_740_992.0)
}

/// The standard normal quantile (inverse CDF) of `p` in (0, 1), by Acklam's rational
/// approximation (relative error below 1.2e-9), with `libm` for `ln` and `sqrt`.
#[must_use]
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail(libm::sqrt(-2.0 * libm::log(p)))
    } else if p > 1.0 - LOW {
        -tail(libm::sqrt(-2.0 * libm::log(1.0 - p)))
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// The 99th percentile of the standard normal distribution.
pub const Z99: f64 = 2.326_347_874_040_841;

/// A log-normal latency distribution fitted to a median and a 99th percentile: both quantiles
/// are hit exactly, and the 1st percentile sits as far below the median (in ratio) as the 99th
/// sits above it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogNormal {
    /// ln of the median, in nanoseconds.
    mu: f64,
    /// The shape: ln(p99 / p50) / z(0.99).
    sigma: f64,
}

impl LogNormal {
    /// Fits the curve; `p99` must be above `p50` (the caller checks, with a clear error).
    #[must_use]
    pub fn fit(p50: Duration, p99: Duration) -> LogNormal {
        let p50 = p50.as_nanos().max(1) as f64;
        let p99 = (p99.as_nanos() as f64).max(p50);
        LogNormal {
            mu: libm::log(p50),
            sigma: libm::log(p99 / p50) / Z99,
        }
    }

    /// The shape parameter (the standard deviation of ln latency).
    #[must_use]
    pub fn sigma(&self) -> f64 {
        self.sigma
    }

    /// The latency at quantile `q` in (0, 1), in nanoseconds.
    #[must_use]
    pub fn quantile_nanos(&self, q: f64) -> f64 {
        libm::exp(self.mu + self.sigma * normal_quantile(q))
    }

    /// One latency, in nanoseconds (at least 1).
    pub fn sample_nanos(&self, rng: &mut fastrand::Rng) -> f64 {
        self.quantile_nanos(open01(rng)).max(1.0)
    }
}

/// An exponential gap with the given mean, in nanoseconds (Poisson arrivals).
pub fn exponential_nanos(rng: &mut fastrand::Rng, mean_nanos: f64) -> f64 {
    -libm::log(open01(rng)) * mean_nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_quantile_matches_known_values() {
        assert!((normal_quantile(0.5)).abs() < 1e-9);
        assert!((normal_quantile(0.99) - Z99).abs() < 1e-8);
        assert!((normal_quantile(0.01) + Z99).abs() < 1e-8);
        assert!((normal_quantile(0.975) - 1.959_963_984_540_054).abs() < 1e-8);
    }

    #[test]
    fn the_fitted_curve_hits_both_quantiles() {
        let d = LogNormal::fit(Duration::from_millis(20), Duration::from_millis(200));
        assert!((d.quantile_nanos(0.5) - 20e6).abs() < 1.0);
        assert!((d.quantile_nanos(0.99) - 200e6).abs() < 10.0);
    }
}
