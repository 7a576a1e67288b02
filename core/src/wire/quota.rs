//! Published quotas: the rate limit a server says it applies to its caller, read from its
//! response headers (the rule that stops the caller before it runs the quota dry is
//! [`limits::quota`](crate::limits::quota)).
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

use crate::time::Duration;

use super::trim_ows;

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
    /// use stormguard_core::wire::quota::Published;
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
/// use stormguard_core::wire::quota::parse_count;
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
/// use stormguard_core::wire::quota::parse_reset;
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
/// use stormguard_core::wire::quota::{parse_ratelimit, Published};
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

/// The header fields a quota is published in, as [`parse_fields`] reads them: the draft's
/// `RateLimit` and `RateLimit-Policy`, its older three fields, then the `X-` three.
const FIELDS: [&[u8]; 8] = [
    b"ratelimit",
    b"ratelimit-policy",
    b"ratelimit-limit",
    b"ratelimit-remaining",
    b"ratelimit-reset",
    b"x-ratelimit-limit",
    b"x-ratelimit-remaining",
    b"x-ratelimit-reset",
];

/// The quota one response publishes, from its header fields (name and value, in any order,
/// names in any case): every form the module lists, each read by its parser and the tightest
/// kept ([`Published::tighter`]). A field given more than once is ambiguous and ignored, as is
/// any other field. `unix_now` is the wall clock's Unix time in seconds, for a reset published
/// as one ([`parse_reset`]): it is called for each reset field present, and only then. One pass
/// over the fields, no allocation.
///
/// ```
/// use stormguard_core::wire::quota::parse_fields;
/// use stormguard_core::Duration;
///
/// let fields: [(&[u8], &[u8]); 3] = [
///     (b"RateLimit", br#""default";r=50;t=30"#),
///     (b"RateLimit-Policy", br#""default";q=100;w=60"#),
///     (b"X-RateLimit-Remaining", b"20"), // the tighter allowance
/// ];
/// let p = parse_fields(fields, || None);
/// assert_eq!((p.limit, p.remaining), (Some(100), Some(20)));
/// assert_eq!(p.reset, Some(Duration::from_secs(30)));
///
/// let repeated: [(&[u8], &[u8]); 2] = [(b"x-ratelimit-remaining", b"7"), (b"x-ratelimit-remaining", b"70")];
/// assert!(parse_fields(repeated, || None).is_none());
/// ```
#[must_use]
pub fn parse_fields<'a>(
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    mut unix_now: impl FnMut() -> Option<u64>,
) -> Published {
    // Each field's value, or `Err` once repeated.
    let mut values: [Option<Result<&[u8], ()>>; 8] = [None; 8];
    for (name, value) in fields {
        let Some(i) = FIELDS.iter().position(|f| f.eq_ignore_ascii_case(name)) else {
            continue;
        };
        if let Some(slot) = values.get_mut(i) {
            *slot = Some(match slot {
                None => Ok(value),
                Some(_) => Err(()),
            });
        }
    }
    let get = |i: usize| values.get(i).copied().flatten().and_then(Result::ok);
    let structured = get(0)
        .and_then(|v| parse_ratelimit(v, get(1)))
        .unwrap_or(Published::NONE);
    let mut fields = |[limit, remaining, reset]: [usize; 3]| Published {
        limit: get(limit).and_then(parse_count),
        remaining: get(remaining).and_then(parse_count),
        reset: get(reset).and_then(|v| parse_reset(v, unix_now())),
    };
    structured
        .tighter(fields([2, 3, 4]))
        .tighter(fields([5, 6, 7]))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_form_of_the_fields_is_read_and_the_tightest_kept() {
        let fields: [(&[u8], &[u8]); 6] = [
            (b"x-ratelimit-limit", b"5000"),
            (b"x-ratelimit-remaining", b"4000"),
            (b"ratelimit-limit", b"100"),
            (b"ratelimit-remaining", b"90"),
            (b"ratelimit-reset", b"5"),
            (b"x-ratelimit-reset", b"1700000060"),
        ];
        let p = parse_fields(fields, || Some(1_700_000_000));
        assert_eq!(p, published(5000, 90, 60));
    }

    #[test]
    fn a_repeated_field_is_ignored_and_the_others_still_read() {
        let fields: [(&[u8], &[u8]); 4] = [
            (b"x-ratelimit-remaining", b"7"),
            (b"x-ratelimit-limit", b"60"),
            (b"x-ratelimit-remaining", b"7"),
            (b"x-ratelimit-remaining", b"70"),
        ];
        let p = parse_fields(fields, || None);
        assert_eq!((p.limit, p.remaining), (Some(60), None));
    }

    #[test]
    fn field_names_match_whatever_their_case_and_no_other_field_counts() {
        let fields: [(&[u8], &[u8]); 3] = [
            (b"X-RateLimit-Remaining", b"3"),
            (b"x-ratelimit-remaining-extra", b"1"),
            (b"retry-after", b"1"),
        ];
        assert_eq!(parse_fields(fields, || None).remaining, Some(3));
    }

    #[test]
    fn the_wall_clock_is_read_only_for_each_reset_field_present() {
        let mut reads = 0;
        let fields: [(&[u8], &[u8]); 2] = [(b"ratelimit-remaining", b"1"), (b"ratelimit", b"r=1")];
        let _ = parse_fields(fields, || {
            reads += 1;
            None
        });
        assert_eq!(reads, 0);
        let fields: [(&[u8], &[u8]); 2] =
            [(b"ratelimit-reset", b"1"), (b"x-ratelimit-reset", b"1")];
        let _ = parse_fields(fields, || {
            reads += 1;
            None
        });
        assert_eq!(reads, 2);
    }
}
