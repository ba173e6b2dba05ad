//! Validated value tags.

use std::borrow::Borrow;
use std::fmt;

/// The longest tag, in bytes of UTF-8. MindSpore limits nothing and TensorBoard nothing either;
/// 1024 bytes keeps every tag readable in both dashboards and safely inside one record.
pub const MAX_TAG_LEN: usize = 1024;

/// Why a string is not a valid [`Tag`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TagError {
    /// The tag is the empty string.
    #[error("tag is empty")]
    Empty,
    /// The tag holds a NUL character at this byte offset.
    #[error("tag {tag:?} contains a nul character at byte {offset}")]
    Nul {
        /// The rejected tag.
        tag: String,
        /// Byte offset of the first NUL.
        offset: usize,
    },
    /// The tag is longer than [`MAX_TAG_LEN`] bytes.
    #[error("tag is {len} bytes long, more than the {MAX_TAG_LEN} allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
}

/// The name of a time series: non-empty UTF-8 without NUL, at most [`MAX_TAG_LEN`] bytes.
///
/// Tags compare, hash and order like their strings, and borrow as `str`, so a
/// `HashSet<Tag>` can be queried with a `&str`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(String);

impl Tag {
    /// Validates `tag`.
    pub fn new(tag: impl Into<String>) -> Result<Tag, TagError> {
        let tag = tag.into();
        if tag.is_empty() {
            return Err(TagError::Empty);
        }
        if tag.len() > MAX_TAG_LEN {
            return Err(TagError::TooLong { len: tag.len() });
        }
        if let Some(offset) = tag.bytes().position(|b| b == 0) {
            return Err(TagError::Nul { tag, offset });
        }
        Ok(Tag(tag))
    }

    /// The tag as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tag as its owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for Tag {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Tag {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Tag {
    type Error = TagError;
    fn try_from(tag: &str) -> Result<Tag, TagError> {
        Tag::new(tag)
    }
}

impl TryFrom<String> for Tag {
    type Error = TagError;
    fn try_from(tag: String) -> Result<Tag, TagError> {
        Tag::new(tag)
    }
}

impl std::str::FromStr for Tag {
    type Err = TagError;
    fn from_str(tag: &str) -> Result<Tag, TagError> {
        Tag::new(tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        assert_eq!(Tag::new("loss").unwrap().as_str(), "loss");
        assert_eq!(Tag::new(""), Err(TagError::Empty));
        assert!(matches!(
            Tag::new("a\0b"),
            Err(TagError::Nul { offset: 1, .. })
        ));
        assert!(Tag::new("x".repeat(MAX_TAG_LEN)).is_ok());
        assert_eq!(
            Tag::new("x".repeat(MAX_TAG_LEN + 1)),
            Err(TagError::TooLong {
                len: MAX_TAG_LEN + 1
            })
        );
        let set: std::collections::HashSet<Tag> = [Tag::new("a/b").unwrap()].into();
        assert!(set.contains("a/b"));
    }
}
