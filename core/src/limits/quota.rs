//! Published quotas: the rate limit a server says it applies to its caller, read from its
//! response headers, and the rule that stops the caller before it runs the quota dry.
//!
//! A server may publish its quota in several forms; [`Published`] is what one response said,
//! whichever form it used:
//! - the IETF httpapi working group's structured fields: `RateLimit-Policy: "default";q=100;w=60`
//!   (the quota `q` per window of `w` seconds) and `RateLimit: "default";r=50;t=30` (`r` left,
//!   `t` seconds until the window resets), read by [`parse_ratelimit`];
//! - the draft's older forms: one `RateLimit` dictionary (`limit=100, remaining=50, reset=30`),
//!   or three fields `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`;
//! - the widespread `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (the
//!   reset in seconds, or a Unix time in seconds), read by [`parse_count`] and [`parse_reset`].
//!
//! Every parser here takes bytes a peer chose: it allocates nothing, never panics, reads at
//! most [`MAX_VALUE`] bytes, and returns `None` for anything it cannot read whole, so a
//! malformed or hostile value is ignored rather than half-believed.
//!
//! [`Quota`] (the `&mut` form) and [`SharedQuota`] (lock-free, `&self`) hold what was published
//! and apply one rule, [`QuotaSettings`]: once the remaining allowance is within the reserve
//! (10% of the limit by default; with no known limit, once nothing is left) every attempt is
//! refused locally with [`RefusalReason::QuotaReserve`] until the published reset. Each admitted
//! attempt spends one unit of the allowance. The rule only tightens: while a quota is known, a
//! later reading may lower the allowance or move the reset later, never raise the allowance or
//! bring the reset sooner. No reading makes the caller wait longer than
//! [`QuotaSettings::max_wait`] (by default the throttled backoff's longest wait, 30 s) from the
//! reading: a reset further away, or none at all, counts as that.
//!
//! Both forms are a [`Limit`], so the call driver treats a refusal as it treats a local rate
//! limiter's: a self-imposed throttle, retried on the throttled curve after the reset (capped
//! by the backoff's maximum), charged nothing to the retry budget and never counted against the
//! breaker; only when no retry fits does the call end as a guarded rejection.
//!
//! ```
//! use stormguard_core::limits::quota::{parse_ratelimit, Published, Quota, QuotaSettings};
//! use stormguard_core::limits::Limit;
//! use stormguard_core::{Duration, Instant, RefusalReason};
//!
//! let published = parse_ratelimit(br#""default";r=11;t=30"#, Some(br#""default";q=100;w=60"#));
//! assert_eq!(
//!     published,
//!     Some(Published { limit: Some(100), remaining: Some(11), reset: Some(Duration::from_secs(30)) })
//! );
//! let mut quota = Quota::new(QuotaSettings::DEFAULT);
//! let now = Instant::from_secs(1);
//! quota.on_published(now, published.unwrap());
//! assert!(quota.take(now).is_ok()); // 11 left, the reserve is 10: one more
//! let refused = quota.take(now).unwrap_err(); // 10 left: within the reserve
//! assert_eq!(refused.reason, RefusalReason::QuotaReserve);
//! assert_eq!(refused.retry_after, Duration::from_secs(30));
//! assert!(quota.take(now + Duration::from_secs(30)).is_ok()); // the window has reset
//! ```

use crate::error::{Bound, Field, RefusalReason, Refused, SettingsError};
use crate::loom::{AtomicU64, Ordering};
use crate::ratio::Ratio;
use crate::{Duration, Instant};

use super::Limit;

/// The longest header value the parsers read: a longer one is ignored whole.
pub const MAX_VALUE: usize = 1024;

/// The most list members [`parse_ratelimit`] reads from either field: the rest are ignored.
pub const MAX_MEMBERS: usize = 16;

/// The most digits of an integer the parsers read (structured fields' integers have at most
/// 15): a longer number is unreadable.
const MAX_DIGITS: usize = 15;

/// A count at or above this in a reset field is a Unix time (seconds since 1970), not a number
/// of seconds: 10^9 seconds is September 2001, and no window lasts 31 years.
pub const UNIX_TIME_FROM: u64 = 1_000_000_000;

/// What one response published of its quota. Each part is `None` when the response did not
/// say (or said it in a way that could not be read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Published {
    /// Requests the window allows in all.
    pub limit: Option<u64>,
    /// Requests left in the current window.
    pub remaining: Option<u64>,
    /// Until the window resets, counted from the response.
    pub reset: Option<Duration>,
}

impl Published {
    /// Nothing published.
    pub const NONE: Published = Published {
        limit: None,
        remaining: None,
        reset: None,
    };

    /// `true` when nothing was published.
    #[must_use]
    pub const fn is_none(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset.is_none()
    }

    /// Two readings of one response (two header forms) as one, the tighter of each: the lower
    /// allowance, the higher limit (the larger reserve) and the later reset.
    ///
    /// ```
    /// use stormguard_core::limits::Published;
    /// use stormguard_core::Duration;
    /// let a = Published { limit: Some(100), remaining: Some(40), reset: None };
    /// let b = Published { limit: None, remaining: Some(60), reset: Some(Duration::from_secs(9)) };
    /// assert_eq!(
    ///     a.tighter(b),
    ///     Published { limit: Some(100), remaining: Some(40), reset: Some(Duration::from_secs(9)) }
    /// );
    /// ```
    #[must_use]
    pub fn tighter(self, other: Published) -> Published {
        fn pick<T: Ord>(a: Option<T>, b: Option<T>, f: fn(T, T) -> T) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(f(a, b)),
                (a, b) => a.or(b),
            }
        }
        Published {
            limit: pick(self.limit, other.limit, Ord::max),
            remaining: pick(self.remaining, other.remaining, Ord::min),
            reset: pick(self.reset, other.reset, Ord::max),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsers

/// `value` without the optional whitespace (spaces and tabs) around it, if it is not too long.
fn bounded(value: &[u8]) -> Option<&[u8]> {
    (value.len() <= MAX_VALUE).then(|| trim_ows(value))
}

fn trim_ows(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(value.len());
    let rest = value.get(start..).unwrap_or(&[]);
    let end = rest
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(0, |i| i.saturating_add(1));
    rest.get(..end).unwrap_or(&[])
}

/// Reads 1 to [`MAX_DIGITS`] ASCII digits at the start of `s`: the number and what follows.
fn digits(s: &[u8]) -> Option<(u64, &[u8])> {
    let len = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if len == 0 || len > MAX_DIGITS {
        return None;
    }
    let (number, rest) = s.split_at_checked(len)?;
    let n = number.iter().fold(0u64, |n, &b| {
        n.saturating_mul(10)
            .saturating_add(u64::from(b.wrapping_sub(b'0')))
    });
    Some((n, rest))
}

/// A count (`RateLimit-Limit`, `RateLimit-Remaining`, `X-RateLimit-Limit`,
/// `X-RateLimit-Remaining`): a non-negative integer of at most 15 digits, with optional
/// whitespace around it. The draft's older `RateLimit-Limit` may go on with policies after a
/// comma or a semicolon (`100, 100;w=60`): the first number is the count. `None` for anything
/// else (a sign, a fraction, letters, an empty or over-long value).
///
/// ```
/// use stormguard_core::limits::quota::parse_count;
/// assert_eq!(parse_count(b" 42 "), Some(42));
/// assert_eq!(parse_count(b"100, 100;w=60"), Some(100));
/// assert_eq!(parse_count(b"-1"), None);
/// assert_eq!(parse_count(b"1e3"), None);
/// ```
#[must_use]
pub fn parse_count(value: &[u8]) -> Option<u64> {
    let (n, rest) = digits(bounded(value)?)?;
    match rest.first() {
        None | Some(b',' | b';' | b' ' | b'\t') => Some(n),
        Some(_) => None,
    }
}

/// A reset (`RateLimit-Reset`, `X-RateLimit-Reset`): seconds until the window resets, with an
/// optional fraction (`1.5`, rounded up to the millisecond); or, from [`UNIX_TIME_FROM`] on, a
/// Unix time in seconds, counted from `unix_now` (the wall clock's Unix time, which the caller
/// reads; a time already past is zero, and without `unix_now` such a value is unreadable).
/// `None` for anything else.
///
/// ```
/// use stormguard_core::limits::quota::parse_reset;
/// use stormguard_core::Duration;
/// assert_eq!(parse_reset(b"30", None), Some(Duration::from_secs(30)));
/// assert_eq!(parse_reset(b"0.25", None), Some(Duration::from_millis(250)));
/// assert_eq!(parse_reset(b"1700000060", Some(1_700_000_000)), Some(Duration::from_secs(60)));
/// assert_eq!(parse_reset(b"1700000060", None), None);
/// assert_eq!(parse_reset(b"soon", None), None);
/// ```
#[must_use]
pub fn parse_reset(value: &[u8], unix_now: Option<u64>) -> Option<Duration> {
    let (secs, rest) = digits(bounded(value)?)?;
    let millis = match rest.split_first() {
        None => 0,
        Some((b'.', fraction)) => {
            let len = fraction.iter().take_while(|b| b.is_ascii_digit()).count();
            if len == 0 || len != fraction.len() || len > MAX_DIGITS {
                return None;
            }
            // Thousandths, rounded up: never less time than the server said.
            let mut ms = 0u64;
            for i in 0..3 {
                let d = fraction
                    .get(i)
                    .map_or(0, |b| u64::from(b.wrapping_sub(b'0')));
                ms = ms.saturating_mul(10).saturating_add(d);
            }
            let more = fraction.iter().skip(3).any(|&b| b != b'0');
            ms.saturating_add(u64::from(more))
        }
        Some(_) => return None,
    };
    let secs = if secs >= UNIX_TIME_FROM {
        secs.saturating_sub(unix_now?)
    } else {
        secs
    };
    Some(Duration::from_secs(secs).saturating_add(Duration::from_millis(millis)))
}

/// One member of a structured-field list: its name (a string's contents, escapes included, or
/// a token) and the integer parameters read so far.
#[derive(Clone, Copy, Debug, Default)]
struct Member<'a> {
    name: &'a [u8],
    /// `q`, `r`, `t`, `w`, in that order.
    params: [Option<u64>; 4],
    /// A top-level `key=value` of the older dictionary form: which key, and the value.
    entry: Option<(&'a [u8], u64)>,
}

const PARAMS: [&[u8]; 4] = [b"q", b"r", b"t", b"w"];

fn is_key_start(b: u8) -> bool {
    b.is_ascii_lowercase() || b == b'*'
}

fn is_key_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.' | b'*')
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
                | b':'
                | b'/'
        )
}

/// Splits `s` at the first byte `keep` refuses.
fn span(s: &[u8], keep: fn(u8) -> bool) -> (&[u8], &[u8]) {
    let len = s.iter().take_while(|&&b| keep(b)).count();
    s.split_at_checked(len).unwrap_or((s, &[]))
}

/// A structured-field string at the start of `s` (after its opening quote): its contents
/// (escapes left in) and what follows the closing quote.
fn string(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut escaped = false;
    for (i, &b) in s.iter().enumerate() {
        match (escaped, b) {
            (true, b'"' | b'\\') => escaped = false,
            (true, _) => return None,
            (false, b'\\') => escaped = true,
            (false, b'"') => return Some((s.get(..i)?, s.get(i.checked_add(1)?..)?)),
            (false, 0x20..=0x7e) => {}
            (false, _) => return None,
        }
    }
    None
}

/// A bare item we skip (a parameter's value that is not an integer): a string, a token, a
/// decimal, a boolean or byte sequence. What follows it.
fn skip_item(s: &[u8]) -> Option<&[u8]> {
    match s.split_first()? {
        (b'"', rest) => string(rest).map(|(_, after)| after),
        (b'?', rest) => match rest.split_first()? {
            (b'0' | b'1', after) => Some(after),
            _ => None,
        },
        (b':', rest) => {
            let (bytes, after) = span(rest, |b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
            let _ = bytes;
            after.strip_prefix(b":")
        }
        (b'-', rest) => skip_number(rest),
        (&b, _) if b.is_ascii_digit() => skip_number(s),
        (&b, _) if b.is_ascii_alphabetic() || b == b'*' => Some(span(s, is_token_char).1),
        _ => None,
    }
}

fn skip_number(s: &[u8]) -> Option<&[u8]> {
    let (_, rest) = digits(s)?;
    match rest.split_first() {
        Some((b'.', fraction)) => {
            let (decimals, after) = span(fraction, |b| b.is_ascii_digit());
            (!decimals.is_empty() && decimals.len() <= 3).then_some(after)
        }
        _ => Some(rest),
    }
}

/// One list member at the start of `s` and what follows it, or `None` if it is malformed.
fn member(s: &[u8]) -> Option<(Member<'_>, &[u8])> {
    let mut m = Member::default();
    let mut rest = match s.split_first()? {
        (b'"', after) => {
            let (name, after) = string(after)?;
            m.name = name;
            after
        }
        (&b, _) if b.is_ascii_alphabetic() || b == b'*' => {
            let (name, after) = span(s, is_token_char);
            m.name = name;
            // The older dictionary form: `limit=100`.
            if let Some(value) = after.strip_prefix(b"=") {
                let (n, after) = digits(value)?;
                m.entry = Some((name, n));
                after
            } else {
                after
            }
        }
        _ => return None,
    };
    // Parameters: `;key` or `;key=value`, with optional spaces after the semicolon.
    while let Some(after) = rest.strip_prefix(b";") {
        let after = trim_start_sp(after);
        let (&first, _) = after.split_first()?;
        if !is_key_start(first) {
            return None;
        }
        let (key, after) = span(after, is_key_char);
        rest = match after.strip_prefix(b"=") {
            Some(value) => {
                let which = PARAMS.iter().position(|p| *p == key);
                match (which, digits(value)) {
                    (Some(i), Some((n, after))) if !after.starts_with(b".") => {
                        if let Some(slot) = m.params.get_mut(i) {
                            *slot = Some(n);
                        }
                        after
                    }
                    _ => skip_item(value)?,
                }
            }
            None => after,
        };
    }
    Some((m, rest))
}

fn trim_start_sp(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ').count();
    s.get(n..).unwrap_or(&[])
}

/// Calls `each` with every member of the list in `value`, at most [`MAX_MEMBERS`]; `None` if
/// the list is malformed anywhere in what was read.
fn members<'a>(value: &'a [u8], mut each: impl FnMut(&Member<'a>)) -> Option<()> {
    let mut rest = bounded(value)?;
    if rest.is_empty() {
        return None;
    }
    for _ in 0..MAX_MEMBERS {
        let (m, after) = member(rest)?;
        each(&m);
        let after = trim_ows(after);
        match after.split_first() {
            None => return Some(()),
            Some((b',', next)) => rest = trim_ows(next),
            Some(_) => return None,
        }
        if rest.is_empty() {
            return None;
        }
    }
    Some(())
}

/// The quota a `RateLimit` field publishes, with the `RateLimit-Policy` field of the same
/// response if it had one (IETF httpapi ratelimit headers, structured fields):
///
/// - `RateLimit: "default";r=50;t=30`: a list of policies, each with `r` (requests left) and
///   `t` (seconds until the window resets). With several, the one with the fewest left.
/// - `RateLimit-Policy: "default";q=100;w=60`: each policy's quota `q` per window `w`; the
///   limit of the policy named as the chosen one (else the largest quota listed).
/// - The draft's older dictionary, `RateLimit: limit=100, remaining=50, reset=30`.
///
/// `None` when `ratelimit` cannot be read whole (a malformed policy field only loses the
/// limit), or publishes no allowance. At most [`MAX_VALUE`] bytes and [`MAX_MEMBERS`] members
/// of each are read.
///
/// ```
/// use stormguard_core::limits::quota::{parse_ratelimit, Published};
/// use stormguard_core::Duration;
///
/// let two = parse_ratelimit(b"\"hour\";r=900;t=3000, \"burst\";r=3;t=1", None).unwrap();
/// assert_eq!((two.remaining, two.reset), (Some(3), Some(Duration::from_secs(1))));
/// let old = parse_ratelimit(b"limit=100, remaining=0, reset=7", None).unwrap();
/// assert_eq!(old, Published { limit: Some(100), remaining: Some(0), reset: Some(Duration::from_secs(7)) });
/// assert_eq!(parse_ratelimit(b"\"default\";r=-5", None), None);
/// ```
#[must_use]
pub fn parse_ratelimit(ratelimit: &[u8], policy: Option<&[u8]>) -> Option<Published> {
    let mut chosen: Option<Member<'_>> = None;
    let mut dict = Published::NONE;
    members(ratelimit, |m| {
        if let Some((key, n)) = m.entry {
            match key {
                b"limit" => dict.limit = Some(n),
                b"remaining" => dict.remaining = Some(n),
                b"reset" => dict.reset = Some(Duration::from_secs(n)),
                _ => {}
            }
            return;
        }
        let Some(r) = m.params.get(1).copied().flatten() else {
            return;
        };
        let fewer = chosen
            .and_then(|c| c.params.get(1).copied().flatten())
            .is_none_or(|c| r < c);
        if fewer {
            chosen = Some(*m);
        }
    })?;
    let Some(chosen) = chosen else {
        return dict.remaining.is_some().then_some(dict);
    };
    let limit = policy.and_then(|p| {
        let mut named = None;
        let mut largest = None;
        members(p, |m| {
            if let Some(q) = m.params.first().copied().flatten() {
                if m.name == chosen.name {
                    named = Some(q);
                }
                largest = Some(largest.map_or(q, |l: u64| l.max(q)));
            }
        })?;
        named.or(largest)
    });
    Some(
        Published {
            limit,
            remaining: chosen.params.get(1).copied().flatten(),
            reset: chosen
                .params
                .get(2)
                .copied()
                .flatten()
                .map(Duration::from_secs),
        }
        .tighter(dict),
    )
}

// ---------------------------------------------------------------------------------------------
// The rule

/// How a published quota is kept: the reserve left untouched and the longest wait a reading
/// can impose.
///
/// ```
/// use stormguard_core::limits::QuotaSettings;
/// use stormguard_core::{Duration, Field, Ratio};
///
/// let s = QuotaSettings::new(Ratio::from_percent(20).unwrap(), Duration::from_secs(10))?;
/// assert_eq!(s.reserve_of(100), 20);
/// let e = QuotaSettings::new(Ratio::ONE, Duration::from_secs(10)).unwrap_err();
/// assert_eq!(e.field, Field::QuotaReserve);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct QuotaSettings {
    reserve: Ratio,
    max_wait: Duration,
}

/// The default reserve: 10% of the published limit.
pub const DEFAULT_RESERVE: Ratio = Ratio::from_ppm_const(100_000);

impl QuotaSettings {
    /// A reserve of 10% of the limit (room left for the other clients sharing the quota, and
    /// for the requests already on their way), and a longest wait of 30 s, the default
    /// backoff's longest wait.
    pub const DEFAULT: QuotaSettings = QuotaSettings {
        reserve: DEFAULT_RESERVE,
        max_wait: Duration::from_secs(30),
    };

    /// `reserve` of the limit kept untouched (0 to below 1: [`Ratio::ONE`] would refuse every
    /// request), and `max_wait`, the longest a reading may keep the caller waiting (above
    /// zero; a policy passes its backoff's longest wait).
    pub const fn new(reserve: Ratio, max_wait: Duration) -> Result<QuotaSettings, SettingsError> {
        if reserve.ppm() >= Ratio::ONE.ppm() {
            return Err(SettingsError::new(Field::QuotaReserve, Bound::BelowOne));
        }
        if max_wait.is_zero() {
            return Err(SettingsError::new(
                Field::QuotaMaxWait,
                Bound::AtLeastDuration(Duration::from_nanos(1)),
            ));
        }
        Ok(QuotaSettings { reserve, max_wait })
    }

    /// The share of the limit kept untouched.
    #[must_use]
    pub const fn reserve(&self) -> Ratio {
        self.reserve
    }

    /// The longest a reading may keep the caller waiting, from the reading.
    #[must_use]
    pub const fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// The reserve of a `limit`, rounded down.
    #[must_use]
    pub const fn reserve_of(&self, limit: u64) -> u64 {
        crate::ratio::mul_div(limit, self.reserve.ppm(), Ratio::ONE.ppm())
    }
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings::DEFAULT
    }
}

/// What is known of a quota, in plain numbers: the pure rule's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct QuotaState {
    /// Requests left (published, less the attempts admitted since).
    pub remaining: u32,
    /// The reserve: at or below this many left, attempts are refused.
    pub floor: u32,
    /// When the quota stops holding (the published reset, bounded); `None`: no quota known.
    pub until: Option<Instant>,
}

impl QuotaState {
    /// The state after `published` is read at `now`: tighter only while a quota is known
    /// (fewer left, a larger reserve, a later reset), a fresh quota once the last has reset.
    /// A reading without an allowance changes nothing.
    #[must_use]
    pub fn read(self, settings: &QuotaSettings, now: Instant, published: Published) -> QuotaState {
        let Some(remaining) = published.remaining else {
            return self;
        };
        let remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
        let floor = published.limit.map_or(0, |l| {
            u32::try_from(settings.reserve_of(l)).unwrap_or(u32::MAX)
        });
        let wait = published
            .reset
            .map_or(settings.max_wait, |r| r.min(settings.max_wait));
        let until = now.saturating_add(wait);
        match self.until {
            Some(known) if now < known => QuotaState {
                remaining: self.remaining.min(remaining),
                floor: self.floor.max(floor),
                until: Some(known.max(until)),
            },
            _ => QuotaState {
                remaining,
                floor,
                until: (!wait.is_zero()).then_some(until),
            },
        }
    }

    /// Takes one request of the allowance at `now`, or refuses while within the reserve (with
    /// the time until the reset).
    pub fn take(self, now: Instant) -> (Result<(), Refused>, QuotaState) {
        match self.check(now) {
            Ok(()) if self.holds_at(now) => (
                Ok(()),
                QuotaState {
                    remaining: self.remaining.saturating_sub(1),
                    ..self
                },
            ),
            // No quota holds: nothing to spend (a reading after the reset starts afresh).
            Ok(()) => (Ok(()), self),
            Err(refused) => (Err(refused), self),
        }
    }

    /// Would a request be admitted at `now`? Changes nothing.
    pub fn check(self, now: Instant) -> Result<(), Refused> {
        match self.until {
            Some(until) if now < until && self.remaining <= self.floor => Err(Refused {
                reason: RefusalReason::QuotaReserve,
                retry_after: until.saturating_duration_since(now),
            }),
            _ => Ok(()),
        }
    }

    /// Whether a quota is known and holds at `now`.
    #[must_use]
    pub fn holds_at(self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }
}

/// A published quota kept by one owner (`&mut`): see the [module docs](self).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Quota {
    settings: QuotaSettings,
    state: QuotaState,
}

impl Quota {
    /// No quota known yet.
    #[must_use]
    pub const fn new(settings: QuotaSettings) -> Quota {
        Quota {
            settings,
            state: QuotaState {
                remaining: 0,
                floor: 0,
                until: None,
            },
        }
    }

    /// The settings.
    #[must_use]
    pub const fn settings(&self) -> &QuotaSettings {
        &self.settings
    }

    /// What is known now.
    #[must_use]
    pub const fn state(&self) -> QuotaState {
        self.state
    }

    /// Reads what a response received at `now` published.
    pub fn on_published(&mut self, now: Instant, published: Published) {
        self.state = self.state.read(&self.settings, now, published);
    }
}

impl Limit for Quota {
    fn take(&mut self, now: Instant) -> Result<(), Refused> {
        let (result, next) = self.state.take(now);
        self.state = next;
        result
    }
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        self.state.check(now)
    }
}

/// A published quota shared by every task calling one host (`&self`, lock-free): see the
/// [module docs](self).
///
/// Two atomic words: the allowance and reserve in one, the reset in the other. A snapshot, and
/// a reading racing a request, are consistent per word, not across them: a request admitted
/// while a fresh quota is being stored may be counted against neither, so the allowance can
/// lag by the requests in that race (the reserve is there for such slack). Every word is
/// changed by load, pure step, compare-exchange, so no update is lost.
///
/// ```
/// use stormguard_core::limits::{Limit, Published, QuotaSettings, SharedQuota};
/// use stormguard_core::{Duration, Instant};
///
/// let quota = SharedQuota::new(QuotaSettings::DEFAULT);
/// let now = Instant::from_secs(5);
/// quota.on_published(now, Published { limit: Some(10), remaining: Some(2), reset: Some(Duration::from_secs(60)) });
/// assert!((&quota).take(now).is_ok());
/// let refused = (&quota).take(now).unwrap_err();
/// // The server said 60 s; no reading stalls a caller longer than the longest wait, 30 s.
/// assert_eq!(refused.retry_after, Duration::from_secs(30));
/// ```
#[derive(Debug)]
pub struct SharedQuota {
    settings: QuotaSettings,
    /// `remaining << 32 | floor`.
    counts: AtomicU64,
    /// The reset in nanoseconds; 0 when no quota is known.
    until: AtomicU64,
}

fn pack(state: QuotaState) -> (u64, u64) {
    let counts = u64::from(state.remaining) << 32 | u64::from(state.floor);
    let until = state.until.map_or(0, |u| u.as_nanos().max(1));
    (counts, until)
}

fn unpack(counts: u64, until: u64) -> QuotaState {
    QuotaState {
        remaining: u32::try_from(counts >> 32).unwrap_or(u32::MAX),
        floor: u32::try_from(counts & u64::from(u32::MAX)).unwrap_or(u32::MAX),
        until: (until != 0).then(|| Instant::from_nanos(until)),
    }
}

impl SharedQuota {
    /// No quota known yet.
    #[must_use]
    pub fn new(settings: QuotaSettings) -> SharedQuota {
        SharedQuota {
            settings,
            counts: AtomicU64::new(0),
            until: AtomicU64::new(0),
        }
    }

    /// The settings.
    #[must_use]
    pub const fn settings(&self) -> &QuotaSettings {
        &self.settings
    }

    /// What is known now (consistent per word).
    #[must_use]
    pub fn state(&self) -> QuotaState {
        unpack(
            self.counts.load(Ordering::Acquire),
            self.until.load(Ordering::Acquire),
        )
    }

    /// Reads what a response received at `now` published.
    pub fn on_published(&self, now: Instant, published: Published) {
        if published.remaining.is_none() {
            return;
        }
        let mut until = self.until.load(Ordering::Acquire);
        loop {
            let mut counts = self.counts.load(Ordering::Acquire);
            let next = loop {
                let next = unpack(counts, until).read(&self.settings, now, published);
                let (c, _) = pack(next);
                match self.counts.compare_exchange_weak(
                    counts,
                    c,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break next,
                    Err(seen) => counts = seen,
                }
            };
            let (_, u) = pack(next);
            match self
                .until
                .compare_exchange(until, u, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                // The reset moved meanwhile (another reading, or an expiry): read again
                // against it. Each turn is a reading that came later, so this ends.
                Err(seen) => until = seen,
            }
        }
    }
}

impl Limit for &SharedQuota {
    fn take(&mut self, now: Instant) -> Result<(), Refused> {
        let until = self.until.load(Ordering::Acquire);
        if until == 0 || now.as_nanos() >= until {
            return Ok(());
        }
        let mut counts = self.counts.load(Ordering::Acquire);
        loop {
            let (result, next) = unpack(counts, until).take(now);
            result?;
            let (c, _) = pack(next);
            match self
                .counts
                .compare_exchange_weak(counts, c, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(seen) => counts = seen,
            }
        }
    }
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        self.state().check(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: QuotaSettings = QuotaSettings::DEFAULT;

    fn published(limit: u64, remaining: u64, reset_secs: u64) -> Published {
        Published {
            limit: Some(limit),
            remaining: Some(remaining),
            reset: Some(Duration::from_secs(reset_secs)),
        }
    }

    #[test]
    fn the_ietf_structured_fields_are_read() {
        let p = parse_ratelimit(br#""default";r=50;t=30"#, Some(br#""default";q=100;w=60"#));
        assert_eq!(p, Some(published(100, 50, 30)));
        // Parameters in any order, unknown ones (any bare item) skipped.
        let p = parse_ratelimit(
            br#"day;t=10;pk=:AQID:;x="a\"b";r=7;f=1.5;b=?1"#,
            Some(b"day;w=86400;q=1000, minute;q=10"),
        );
        assert_eq!(p, Some(published(1000, 7, 10)));
    }

    #[test]
    fn the_policy_with_the_fewest_left_is_the_one_kept() {
        let p = parse_ratelimit(
            b"hour;r=900;t=3000, burst;r=3;t=1",
            Some(b"hour;q=1000;w=3600, burst;q=10;w=1"),
        );
        assert_eq!(p, Some(published(10, 3, 1)));
    }

    #[test]
    fn malformed_fields_are_ignored_whole() {
        for bad in [
            &b""[..],
            b"   ",
            b"\"default\";r=-5",
            b"\"default\";r=5;t=",
            b"\"unterminated;r=5",
            b"default;r=5,",
            b"default;r=5,,x;r=1",
            b"default;R=5",
            b"default;r=5 junk",
            b"default;r=1234567890123456",
            b"\xff;r=1",
            b";r=1",
        ] {
            assert_eq!(parse_ratelimit(bad, None), None, "{bad:?}");
        }
        // Without `r`, nothing is published.
        assert_eq!(parse_ratelimit(b"default;t=5", None), None);
        // A malformed policy only loses the limit.
        assert_eq!(
            parse_ratelimit(b"default;r=5;t=9", Some(b"default;q=")).map(|p| p.limit),
            Some(None)
        );
    }

    #[test]
    fn a_value_longer_than_the_bound_is_not_read() {
        let mut long = [b' '; MAX_VALUE + 1];
        long[0] = b'7';
        assert_eq!(parse_count(&long), None);
        assert_eq!(parse_count(&long[..MAX_VALUE]), Some(7));
    }

    #[test]
    fn resets_in_unix_time_count_from_the_wall_clock() {
        assert_eq!(
            parse_reset(b"1700000100", Some(1_700_000_000)),
            Some(Duration::from_secs(100))
        );
        // Already past.
        assert_eq!(
            parse_reset(b"1600000000", Some(1_700_000_000)),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_reset(b"1.0001", None),
            Some(Duration::from_millis(1_001))
        );
        assert_eq!(parse_reset(b"1.", None), None);
        assert_eq!(parse_reset(b"+1", None), None);
    }

    #[test]
    fn within_the_reserve_attempts_are_refused_until_the_reset() {
        let mut q = Quota::new(S);
        let t0 = Instant::from_secs(100);
        q.on_published(t0, published(100, 12, 20));
        assert!(q.take(t0).is_ok());
        assert!(q.take(t0).is_ok());
        let r = q.take(t0).unwrap_err();
        assert_eq!(r.reason, RefusalReason::QuotaReserve);
        assert_eq!(r.retry_after, Duration::from_secs(20));
        let later = t0 + Duration::from_secs(5);
        assert_eq!(
            q.peek(later).unwrap_err().retry_after,
            Duration::from_secs(15)
        );
        assert!(q.take(t0 + Duration::from_secs(20)).is_ok());
        assert!(!q.state().holds_at(t0 + Duration::from_secs(20)));
    }

    #[test]
    fn with_no_limit_known_only_an_empty_allowance_refuses() {
        let mut q = Quota::new(S);
        let t0 = Instant::from_secs(1);
        let p = Published {
            limit: None,
            remaining: Some(1),
            reset: Some(Duration::from_secs(5)),
        };
        q.on_published(t0, p);
        assert!(q.take(t0).is_ok());
        assert!(q.take(t0).is_err());
    }

    #[test]
    fn a_known_quota_is_never_loosened_early() {
        let mut q = Quota::new(S);
        let t0 = Instant::from_secs(1);
        q.on_published(t0, published(100, 11, 20));
        // A later reading saying more is left, or a sooner reset, changes nothing.
        q.on_published(t0 + Duration::from_secs(1), published(100, 90, 2));
        assert_eq!(q.state().remaining, 11);
        assert_eq!(q.state().until, Some(t0 + Duration::from_secs(20)));
        // Fewer left, and a later reset within the bound, are taken.
        q.on_published(t0 + Duration::from_secs(2), published(100, 10, 25));
        assert_eq!(q.state().remaining, 10);
        assert_eq!(q.state().until, Some(t0 + Duration::from_secs(27)));
        assert!(q.take(t0 + Duration::from_secs(3)).is_err());
        // Once reset, a fresh quota replaces it.
        q.on_published(t0 + Duration::from_secs(27), published(100, 90, 60));
        assert_eq!(q.state().remaining, 90);
    }

    #[test]
    fn no_reading_stalls_a_caller_past_the_longest_wait() {
        let mut q = Quota::new(S);
        let t0 = Instant::from_secs(1);
        q.on_published(t0, published(100, 0, u64::MAX / 4));
        assert_eq!(q.take(t0).unwrap_err().retry_after, S.max_wait());
        // Without a reset, the longest wait too.
        let mut q = Quota::new(S);
        q.on_published(
            t0,
            Published {
                limit: None,
                remaining: Some(0),
                reset: None,
            },
        );
        assert_eq!(q.take(t0).unwrap_err().retry_after, S.max_wait());
        assert!(q.take(t0 + S.max_wait()).is_ok());
    }

    #[test]
    fn the_shared_form_agrees_with_the_owned_one() {
        let shared = SharedQuota::new(S);
        let mut owned = Quota::new(S);
        let mut now = Instant::from_secs(3);
        let readings = [(100, 13, 4), (100, 50, 9), (100, 12, 2), (40, 3, 1)];
        for (i, &(l, r, t)) in readings.iter().cycle().take(40).enumerate() {
            if i % 3 == 0 {
                shared.on_published(now, published(l, r, t));
                owned.on_published(now, published(l, r, t));
            }
            assert_eq!((&shared).take(now), owned.take(now));
            assert_eq!(shared.state(), owned.state());
            now += Duration::from_millis(700);
        }
    }

    #[test]
    fn the_call_driver_waits_out_a_quota_as_a_self_imposed_throttle() {
        use crate::call::{Unguarded, Unlimited};
        use crate::limits::RateLimited;
        use crate::{Call, CallSettings, Name, Outcome, Parts, Step};

        let mut quota = Quota::new(S);
        let t0 = Instant::from_secs(1);
        quota.on_published(t0, published(100, 10, 2));
        let mut parts = Parts {
            breaker: RateLimited::new(Unguarded(Name::new("api")), quota),
            budget: Unlimited,
        };
        let mut events = [""; 4];
        let mut seen = 0;
        let mut call = Call::begin(&CallSettings::DEFAULT, t0);
        // Within the reserve: the published reset is waited out (no budget, no breaker).
        let step = call.poll(&mut parts, t0, &mut |e| {
            if let Some(kind) = events.get_mut(seen) {
                *kind = e.kind();
            }
            seen += 1;
        });
        // The reset, later by a draw of up to the backoff's base: the calls waiting on it do
        // not all come back at the same instant.
        let Step::Wait(wait) = step else {
            panic!("waits out the reset, not {step:?}");
        };
        let base = CallSettings::DEFAULT.backoff().base();
        assert!(wait >= Duration::from_secs(2) && wait <= Duration::from_secs(2) + base);
        let t1 = t0 + wait;
        let Step::Attempt(permit) = call.poll(&mut parts, t1, &mut |_| {}) else {
            panic!("the quota has reset");
        };
        call.complete(&mut parts, permit, t1, Outcome::Success, &mut |_| {});
        assert!(matches!(
            call.poll(&mut parts, t1, &mut |_| {}),
            Step::Done(_)
        ));
        // The attempt the quota refused, then the Retry event announcing the wait.
        assert_eq!(events[..seen], ["attempt", "retry"]);

        // With no retry left, it is the guarded rejection, naming the quota.
        parts
            .breaker
            .limiter_mut()
            .on_published(t1, published(100, 0, 5));
        let once = CallSettings::builder().max_attempts(1).build().unwrap();
        let mut call = Call::begin(&once, t1);
        let Step::Reject(r) = call.poll(&mut parts, t1, &mut |_| {}) else {
            panic!("refused");
        };
        assert_eq!(r.reason, RefusalReason::QuotaReserve);
        // Counted from the end of the guarded pause.
        assert_eq!(r.retry_after, Duration::from_secs(5) - r.pause);
    }

    #[test]
    fn settings_are_checked() {
        let e = QuotaSettings::new(Ratio::ONE, Duration::from_secs(1)).unwrap_err();
        assert_eq!((e.field, e.bound), (Field::QuotaReserve, Bound::BelowOne));
        let e = QuotaSettings::new(Ratio::ZERO, Duration::ZERO).unwrap_err();
        assert_eq!(e.field, Field::QuotaMaxWait);
        assert!(QuotaSettings::new(Ratio::ZERO, Duration::from_secs(1)).is_ok());
        assert_eq!(S.reserve_of(100), 10);
        assert_eq!(S.reserve_of(9), 0);
        assert_eq!(S.reserve_of(u64::MAX), u64::MAX / 10);
    }
}
