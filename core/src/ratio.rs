//! Fixed-point fractions and multiples, so the core's arithmetic is exact integer maths.
//!
//! Settings are written as decimals (`0.1`, `3.0`) in code and configuration files; they are
//! converted once, at construction, and nothing after that touches a float. That is what makes
//! "ten successes at 0.1 fund exactly one retry" true rather than nearly true.

use core::fmt;

use crate::time::div_rem_u32;

/// Parts per million in one whole.
pub(crate) const PPM: u32 = 1_000_000;

/// A fraction in `[0, 1]`, held as parts per million.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Ratio {
    ppm: u32,
}

impl Ratio {
    /// Nothing.
    pub const ZERO: Ratio = Ratio { ppm: 0 };
    /// The whole.
    pub const ONE: Ratio = Ratio { ppm: PPM };

    /// `ppm` parts per million, unchecked: settings hold what they were given and their
    /// `build()` reports a value above one million by field name.
    pub(crate) const fn from_ppm_const(ppm: u32) -> Ratio {
        Ratio { ppm }
    }

    /// `ppm` parts per million; `None` above one million.
    #[must_use]
    pub const fn from_ppm(ppm: u32) -> Option<Ratio> {
        if ppm > PPM {
            None
        } else {
            Some(Ratio { ppm })
        }
    }

    /// `permille` thousandths; `None` above 1000.
    #[must_use]
    pub const fn from_permille(permille: u32) -> Option<Ratio> {
        if permille > 1000 {
            None
        } else {
            Some(Ratio {
                ppm: permille.saturating_mul(1000),
            })
        }
    }

    /// `percent` hundredths; `None` above 100.
    #[must_use]
    pub const fn from_percent(percent: u32) -> Option<Ratio> {
        if percent > 100 {
            None
        } else {
            Some(Ratio {
                ppm: percent.saturating_mul(10_000),
            })
        }
    }

    /// The nearest part-per-million to `x`; `None` for NaN or anything outside `[0, 1]`.
    #[must_use]
    pub const fn from_f64(x: f64) -> Option<Ratio> {
        // NaN fails both comparisons.
        if !(x >= 0.0 && x <= 1.0) {
            return None;
        }
        let scaled = x * PPM as f64 + 0.5;
        // In range [0.5, 1_000_000.5] here, so the cast is exact after truncation.
        let ppm = scaled as u32;
        Some(Ratio {
            ppm: if ppm > PPM { PPM } else { ppm },
        })
    }

    /// Parts per million.
    #[must_use]
    pub const fn ppm(self) -> u32 {
        self.ppm
    }

    /// As a float, for dashboards and display.
    #[must_use]
    pub fn as_f64(self) -> f64 {
        f64::from(self.ppm) / f64::from(PPM)
    }

    /// `true` for [`Ratio::ZERO`].
    #[must_use]
    pub const fn is_zero(self) -> bool {
        self.ppm == 0
    }

    /// `num / den` rounded down; `None` when `den` is zero or `num > den`.
    #[must_use]
    pub fn of(num: u64, den: u64) -> Option<Ratio> {
        if den == 0 || num > den {
            return None;
        }
        let ppm = u128::from(num)
            .saturating_mul(u128::from(PPM))
            .checked_div(u128::from(den))?;
        Some(Ratio {
            ppm: u32::try_from(ppm).unwrap_or(PPM),
        })
    }

    /// `true` when `num / den >= self`, computed exactly. With `den == 0` this is `false`.
    #[must_use]
    pub(crate) fn reached_by(self, num: u64, den: u64) -> bool {
        den != 0
            && u128::from(num).saturating_mul(u128::from(PPM))
                >= u128::from(den).saturating_mul(u128::from(self.ppm))
    }
}

impl fmt::Display for Ratio {
    /// As a percentage with up to four decimals, e.g. `5%`, `12.5%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.ppm / 10_000;
        let frac = self.ppm % 10_000;
        if frac == 0 {
            write!(f, "{whole}%")
        } else {
            let mut digits = frac;
            let mut width: usize = 4;
            while digits.is_multiple_of(10) {
                digits /= 10;
                width = width.saturating_sub(1);
            }
            write!(f, "{whole}.{digits:0width$}%")
        }
    }
}

impl fmt::Debug for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `n * m / d` rounded down, exact and saturating, in 64-bit arithmetic (no 128-bit helpers on
/// a microcontroller): with `n = q d + r`, it is `q m + r m / d`, and `r m < d m < 2^64`.
pub(crate) const fn mul_div(n: u64, m: u32, d: u32) -> u64 {
    match div_rem_u32(n, d) {
        Some((q, r)) => {
            // r < d, so r * m fits in 64 bits.
            let part = match div_rem_u32((r as u64).saturating_mul(m as u64), d) {
                Some((p, _)) => p,
                None => 0,
            };
            q.saturating_mul(m as u64).saturating_add(part)
        }
        None => u64::MAX,
    }
}

/// A multiple (`3x`, `2.5x`), held in thousandths.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Multiple {
    milli: u32,
}

/// [`Multiple::MAX_WHOLE`] in thousandths: it fits in a `u32`.
const MAX_MILLI: u32 = 4_000_000_000;

impl Multiple {
    /// The largest multiple a setting takes (and [`Multiple::from_f64`] makes): a larger whole
    /// multiple would not fit in thousandths, so settings refuse it rather than clamp it.
    pub const MAX_WHOLE: u32 = 4_000_000;

    /// `milli` thousandths (`3000` is `3x`).
    #[must_use]
    pub const fn from_milli(milli: u32) -> Multiple {
        Multiple { milli }
    }

    /// A whole multiple (`3` is `3x`), saturating.
    #[must_use]
    pub const fn whole(x: u32) -> Multiple {
        Multiple {
            milli: x.saturating_mul(1000),
        }
    }

    /// The nearest thousandth to `x`; `None` for NaN, negative values or values above
    /// [`Multiple::MAX_WHOLE`].
    #[must_use]
    pub const fn from_f64(x: f64) -> Option<Multiple> {
        if !(x >= 0.0 && x <= Multiple::MAX_WHOLE as f64) {
            return None;
        }
        Some(Multiple {
            milli: (x * 1000.0 + 0.5) as u32,
        })
    }

    /// Thousandths.
    #[must_use]
    pub const fn milli(self) -> u32 {
        self.milli
    }

    /// `true` when strictly above one (`1.001x` and up).
    #[must_use]
    pub const fn is_above_one(self) -> bool {
        self.milli > 1000
    }

    /// `true` when at most [`Multiple::MAX_WHOLE`].
    #[must_use]
    pub const fn is_within_max(self) -> bool {
        self.milli <= MAX_MILLI
    }

    /// `d * self`, saturating.
    #[must_use]
    pub fn apply(self, d: crate::time::Duration) -> crate::time::Duration {
        crate::time::Duration::from_nanos(mul_div(d.as_nanos(), self.milli, 1000))
    }
}

impl fmt::Display for Multiple {
    /// `3x`, `2.5x`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.milli / 1000;
        let frac = self.milli % 1000;
        if frac == 0 {
            write!(f, "{whole}x")
        } else {
            let mut digits = frac;
            let mut width: usize = 3;
            while digits.is_multiple_of(10) {
                digits /= 10;
                width = width.saturating_sub(1);
            }
            write!(f, "{whole}.{digits:0width$}x")
        }
    }
}

impl fmt::Debug for Multiple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    #[test]
    fn decimal_settings_become_exact_fixed_point() {
        assert_eq!(Ratio::from_f64(0.1).map(Ratio::ppm), Some(100_000));
        assert_eq!(Ratio::from_f64(0.05).map(Ratio::ppm), Some(50_000));
        assert_eq!(Ratio::from_f64(1.5), None);
        assert_eq!(Ratio::from_f64(f64::NAN), None);
        assert_eq!(Ratio::from_f64(-0.1), None);
        assert_eq!(Multiple::from_f64(2.5).map(Multiple::milli), Some(2500));
        assert_eq!(Multiple::from_f64(f64::INFINITY), None);
    }

    #[test]
    fn comparisons_are_exact() {
        let half = Ratio::from_percent(50).unwrap_or(Ratio::ZERO);
        assert!(half.reached_by(1, 2));
        assert!(!half.reached_by(1, 0));
        assert_eq!(Ratio::of(1, 3).map(Ratio::ppm), Some(333_333));
    }

    #[test]
    fn mul_div_is_exact_and_saturates() {
        for (n, m, d) in [
            (0u64, 5u32, 7u32),
            (u64::MAX, 1, 1),
            (u64::MAX / 3, 2999, 1000),
            (123_456_789_012, 250_000, 1_000_000),
            (999, 1_000_000, 1_000_000),
        ] {
            let exact = u128::from(n) * u128::from(m) / u128::from(d);
            let want = u64::try_from(exact).unwrap_or(u64::MAX);
            assert_eq!(mul_div(n, m, d), want, "{n} * {m} / {d}");
        }
        assert_eq!(mul_div(u64::MAX, 3000, 1000), u64::MAX);
    }

    #[test]
    fn display_is_readable() {
        assert_eq!(
            format!("{}", Ratio::from_permille(125).unwrap_or(Ratio::ZERO)),
            "12.5%"
        );
        assert_eq!(
            format!("{}", Ratio::from_percent(5).unwrap_or(Ratio::ZERO)),
            "5%"
        );
        assert_eq!(format!("{}", Multiple::from_milli(2500)), "2.5x");
        assert_eq!(format!("{}", Multiple::whole(3)), "3x");
    }
}
