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

/// The name did not fit in [`NAME_CAPACITY`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NameTooLong;

impl fmt::Display for NameTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "name is longer than {NAME_CAPACITY} bytes")
    }
}

impl core::error::Error for NameTooLong {}

impl Name {
    /// A name from a string literal (or any `&'static str`); usable in `const` and `static`.
    #[must_use]
    pub const fn new(name: &'static str) -> Name {
        Name {
            repr: Repr::Static(name),
        }
    }

    /// A name copied from a borrowed string (a configuration file's, say); errors past
    /// [`NAME_CAPACITY`] bytes rather than truncating silently.
    pub fn try_from_str(name: &str) -> Result<Name, NameTooLong> {
        let mut bytes = [0u8; NAME_CAPACITY];
        let src = name.as_bytes();
        let dst = bytes.get_mut(..src.len()).ok_or(NameTooLong)?;
        dst.copy_from_slice(src);
        let len = u8::try_from(src.len()).map_err(|_| NameTooLong)?;
        Ok(Name {
            repr: Repr::Inline { len, bytes },
        })
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
            Err(NameTooLong)
        );
        let exact = "0123456789abcdef0123456789abcdef";
        assert_eq!(Name::try_from_str(exact).map(|n| n.as_str().len()), Ok(32));
    }

    #[test]
    fn static_and_inline_names_compare_by_text() {
        assert_eq!(Name::new("x"), Name::try_from_str("x").unwrap_or_default());
    }
}
