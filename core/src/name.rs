//! Names that tell breakers apart in logs, telemetry and health endpoints.

use core::fmt;

/// Longest name held inline (bytes of UTF-8).
pub const NAME_CAPACITY: usize = 32;

/// A breaker's (or budget's, or policy's) name: a `&'static str` that works in a `const` on a
/// microcontroller, or an inline copy of up to [`NAME_CAPACITY`] bytes read from a configuration
/// file on a host. Either way it costs no allocation, and it is `Copy`, so settings that hold it
/// can be built in a `const`.
///
/// ```
/// use stormguard_core::Name;
/// const PAYMENTS: Name = Name::new("payments");
/// let from_config = Name::try_from_str("orders-eu").unwrap();
/// assert_eq!(PAYMENTS.as_str(), "payments");
/// assert_eq!(from_config, "orders-eu");
/// ```
#[derive(Clone, Copy)]
pub struct Name {
    repr: Repr,
}

#[derive(Clone, Copy)]
enum Repr {
    Static(&'static str),
    Inline { len: u8, bytes: [u8; NAME_CAPACITY] },
}

/// Why a text cannot be a name.
///
/// A name goes into logs, events, metrics labels and health reports; a blank one tells nothing
/// apart and a control character (a newline, say) breaks the line-oriented formats it is written
/// into. So a blank name (empty or whitespace only) and a name holding a control character are
/// refused wherever a name is taken, as one longer than [`NAME_CAPACITY`] is where it is copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum NameError {
    /// Longer than [`NAME_CAPACITY`] bytes (only where the name is copied inline).
    TooLong,
    /// Empty, or nothing but whitespace.
    Blank,
    /// Holds a control character (Unicode category Cc: U+0000 to U+001F, U+007F to U+009F).
    ControlCharacter,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::TooLong => write!(f, "name is longer than {NAME_CAPACITY} bytes"),
            NameError::Blank => f.write_str("name is blank"),
            NameError::ControlCharacter => f.write_str("name holds a control character"),
        }
    }
}

impl core::error::Error for NameError {}

/// The next character of `bytes` (valid UTF-8) and the rest, `None` at the end. By hand so that
/// it runs in a `const fn`.
const fn next_char(bytes: &[u8]) -> Option<(u32, &[u8])> {
    let Some((&lead, mut rest)) = bytes.split_first() else {
        return None;
    };
    let (mut code, more) = match lead {
        0x00..=0x7F => (lead as u32, 0),
        0xC0..=0xDF => ((lead & 0x1F) as u32, 1),
        0xE0..=0xEF => ((lead & 0x0F) as u32, 2),
        _ => ((lead & 0x07) as u32, 3),
    };
    let mut left: u32 = more;
    while let Some(fewer) = left.checked_sub(1) {
        let Some((&next, after)) = rest.split_first() else {
            break;
        };
        code = (code << 6) | (next & 0x3F) as u32;
        rest = after;
        left = fewer;
    }
    Some((code, rest))
}

/// Unicode's `White_Space` property (what `char::is_whitespace` tests), as a `const fn`.
const fn is_whitespace(c: u32) -> bool {
    matches!(
        c,
        0x09..=0x0D
            | 0x20
            | 0x85
            | 0xA0
            | 0x1680
            | 0x2000..=0x200A
            | 0x2028
            | 0x2029
            | 0x202F
            | 0x205F
            | 0x3000
    )
}

/// Unicode's control characters (category Cc, what `char::is_control` tests).
const fn is_control(c: u32) -> bool {
    matches!(c, 0x00..=0x1F | 0x7F..=0x9F)
}

/// Whether `name` may be a name, whatever its length: not blank and no control character.
const fn check_text(name: &str) -> Result<(), NameError> {
    let mut rest = name.as_bytes();
    let mut blank = true;
    while let Some((c, after)) = next_char(rest) {
        if is_control(c) {
            return Err(NameError::ControlCharacter);
        }
        if !is_whitespace(c) {
            blank = false;
        }
        rest = after;
    }
    if blank {
        Err(NameError::Blank)
    } else {
        Ok(())
    }
}

impl Name {
    /// A name from a string literal (or any `&'static str`); usable in `const` and `static`.
    ///
    /// This constructor checks nothing, so that it stays infallible in a `const`: whatever
    /// takes the name (a settings builder's `build`, a policy's, an engine's rule list) checks
    /// it with [`Name::check`] and refuses a blank one or one holding a control character. To
    /// check a literal where it is written, use [`Name::try_new`]:
    ///
    /// ```
    /// use stormguard_core::{Name, name::NameError};
    /// const ORDERS: Name = match Name::try_new("orders") {
    ///     Ok(name) => name,
    ///     Err(_) => panic!("not a name"), // a compile error, in a `const`
    /// };
    /// assert_eq!(ORDERS, "orders");
    /// assert_eq!(Name::try_new("line\nbreak"), Err(NameError::ControlCharacter));
    /// assert_eq!(Name::new(" ").check(), Err(NameError::Blank));
    /// ```
    #[must_use]
    pub const fn new(name: &'static str) -> Name {
        Name {
            repr: Repr::Static(name),
        }
    }

    /// A checked name from a `&'static str`, usable in `const`: refuses a blank name and one
    /// holding a control character (a `&'static str` is not copied, so any length is fine).
    ///
    /// # Errors
    /// [`NameError::Blank`] or [`NameError::ControlCharacter`].
    pub const fn try_new(name: &'static str) -> Result<Name, NameError> {
        match check_text(name) {
            Ok(()) => Ok(Name::new(name)),
            Err(e) => Err(e),
        }
    }

    /// A name copied from a borrowed string (a configuration file's, say): refuses a blank name
    /// and one holding a control character, and errors past [`NAME_CAPACITY`] bytes rather than
    /// truncating silently.
    ///
    /// # Errors
    /// [`NameError::TooLong`], [`NameError::Blank`] or [`NameError::ControlCharacter`].
    pub fn try_from_str(name: &str) -> Result<Name, NameError> {
        let mut bytes = [0u8; NAME_CAPACITY];
        let src = name.as_bytes();
        let dst = bytes.get_mut(..src.len()).ok_or(NameError::TooLong)?;
        dst.copy_from_slice(src);
        let len = u8::try_from(src.len()).map_err(|_| NameError::TooLong)?;
        check_text(name)?;
        Ok(Name {
            repr: Repr::Inline { len, bytes },
        })
    }

    /// Whether this name may be taken: `Err` for a blank name or one holding a control
    /// character (only [`Name::new`] can make one). Usable in `const`.
    ///
    /// # Errors
    /// [`NameError::Blank`] or [`NameError::ControlCharacter`].
    pub const fn check(&self) -> Result<(), NameError> {
        match &self.repr {
            Repr::Static(s) => check_text(s),
            // Copied in only after the same check.
            Repr::Inline { .. } => Ok(()),
        }
    }

    /// The name's UTF-8 bytes (usable in `const`).
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8] {
        match &self.repr {
            Repr::Static(s) => s.as_bytes(),
            Repr::Inline { len, bytes } => {
                bytes
                    .split_at(if (*len as usize) < NAME_CAPACITY {
                        *len as usize
                    } else {
                        NAME_CAPACITY
                    })
                    .0
            }
        }
    }

    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match &self.repr {
            Repr::Static(s) => s,
            Repr::Inline { len, bytes } => {
                // Only whole `&str`s are copied in, so this is always valid UTF-8.
                let used = bytes.get(..usize::from(*len)).unwrap_or(&[]);
                core::str::from_utf8(used).unwrap_or("")
            }
        }
    }
}

impl Default for Name {
    /// `"unnamed"`.
    fn default() -> Self {
        Name::new("unnamed")
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl core::hash::Hash for Name {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl From<&'static str> for Name {
    fn from(s: &'static str) -> Self {
        Name::new(s)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Name {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{=str}", self.as_str());
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a name of at most {NAME_CAPACITY} bytes")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Name, E> {
                Name::try_from_str(v).map_err(E::custom)
            }
        }
        d.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_longer_than_its_capacity_is_an_error_not_a_truncation() {
        assert_eq!(
            Name::try_from_str("a-name-that-is-definitely-longer-than-32-bytes"),
            Err(NameError::TooLong)
        );
        let exact = "0123456789abcdef0123456789abcdef";
        assert_eq!(Name::try_from_str(exact).map(|n| n.as_str().len()), Ok(32));
    }

    #[test]
    fn a_blank_name_is_refused_wherever_it_comes_from() {
        for blank in ["", " ", " \u{a0}", "\u{3000}\u{2003}"] {
            assert_eq!(
                Name::try_from_str(blank),
                Err(NameError::Blank),
                "{blank:?}"
            );
        }
        assert_eq!(Name::try_new(""), Err(NameError::Blank));
        assert_eq!(Name::new("  ").check(), Err(NameError::Blank));
        assert_eq!(Name::try_from_str(" db ").map(|n| n.check()), Ok(Ok(())));
    }

    #[test]
    fn a_name_with_a_control_character_is_refused_wherever_it_comes_from() {
        for bad in ["db\n", "a\rb", "\u{0}", "x\u{7f}", "x\u{85}y", "tab\tname"] {
            assert_eq!(
                Name::try_from_str(bad),
                Err(NameError::ControlCharacter),
                "{bad:?}"
            );
        }
        const NEWLINE: Result<Name, NameError> = Name::try_new("db\nup 1");
        assert_eq!(NEWLINE, Err(NameError::ControlCharacter));
        assert_eq!(
            Name::new("db\"} 1\nfake").check(),
            Err(NameError::ControlCharacter)
        );
        // Quotes, backslashes and non-ASCII text are fine: the exposition escapes them.
        assert!(Name::try_from_str("a\"b\\c-\u{e9}\u{1f600}").is_ok());
    }

    #[test]
    fn the_const_decoder_agrees_with_the_standard_library() {
        let mut text = [0u8; 4];
        for code in (0..0x3100).chain([0x1_F600, 0x10_FFFF]) {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            let encoded = c.encode_utf8(&mut text);
            assert_eq!(next_char(encoded.as_bytes()).map(|(c, _)| c), Some(code));
            assert_eq!(is_whitespace(code), c.is_whitespace(), "{code:#x}");
            assert_eq!(is_control(code), c.is_control(), "{code:#x}");
        }
    }

    #[test]
    fn static_and_inline_names_compare_by_text() {
        assert_eq!(Name::new("x"), Name::try_from_str("x").unwrap_or_default());
    }
}
