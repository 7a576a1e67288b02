//! How much a call matters: a per-call label the call driver reads when it decides whether to
//! hedge or retry, and that travels between services (on a header, on the host).

use core::fmt;

/// How much a call matters to the one who makes it. Ordered: `Sheddable < Default < Critical`.
///
/// - [`Critical`](Criticality::Critical): work whose failure the user sees (a checkout). Treated
///   as [`Default`](Criticality::Default) by the call driver; a server may admit it first.
/// - [`Default`](Criticality::Default): everything not labelled.
/// - [`Sheddable`](Criticality::Sheddable): work that may be dropped under stress (prefetch,
///   analytics, a cache warm-up): it is never hedged, and it gets no retry once the retry
///   budget is more than half spent, so what is left of the budget goes to work that matters.
///
/// On the wire it is one lower-case word ([`Criticality::as_str`], [`Criticality::parse`]).
///
/// ```
/// use stormguard_core::call::Criticality;
///
/// assert!(Criticality::Sheddable < Criticality::Default);
/// assert_eq!(Criticality::parse(b" Critical "), Some(Criticality::Critical));
/// // A caller cannot raise itself above what the server allows.
/// assert_eq!(Criticality::Critical.capped(Criticality::Default), Criticality::Default);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum Criticality {
    /// May be dropped under stress: never hedged, no retry once the budget is half spent.
    Sheddable,
    /// Not labelled.
    #[default]
    Default,
    /// The caller's user waits on it.
    Critical,
}

/// The longest label [`Criticality::parse`] reads (surrounding whitespace included): anything
/// longer is no label, whatever it holds.
const MAX_LABEL: usize = 32;

impl Criticality {
    /// The label on the wire: `sheddable`, `default` or `critical`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Criticality::Sheddable => "sheddable",
            Criticality::Default => "default",
            Criticality::Critical => "critical",
        }
    }

    /// Reads a label from untrusted bytes (a header value): one of the three words, in any
    /// case, with surrounding spaces or tabs; `None` for anything else (empty, unknown, longer
    /// than 32 bytes, not ASCII). Never panics, never reads past 32 bytes.
    ///
    /// ```
    /// use stormguard_core::call::Criticality;
    /// assert_eq!(Criticality::parse(b"sheddable"), Some(Criticality::Sheddable));
    /// assert_eq!(Criticality::parse(b"SHEDDABLE\t"), Some(Criticality::Sheddable));
    /// assert_eq!(Criticality::parse(b"critical, critical"), None);
    /// assert_eq!(Criticality::parse(&[0xff; 4]), None);
    /// ```
    #[must_use]
    pub fn parse(bytes: &[u8]) -> Option<Criticality> {
        if bytes.len() > MAX_LABEL {
            return None;
        }
        let word = bytes.trim_ascii();
        [
            Criticality::Sheddable,
            Criticality::Default,
            Criticality::Critical,
        ]
        .into_iter()
        .find(|c| word.eq_ignore_ascii_case(c.as_str().as_bytes()))
    }

    /// This label, lowered to `max` if above it: what a server grants a caller that asks for
    /// more than the server lets callers claim.
    #[must_use]
    pub fn capped(self, max: Criticality) -> Criticality {
        self.min(max)
    }

    /// Whether the call driver sheds this work first (no hedge, no retry past half the
    /// budget).
    #[must_use]
    pub const fn is_sheddable(self) -> bool {
        matches!(self, Criticality::Sheddable)
    }
}

impl fmt::Display for Criticality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
