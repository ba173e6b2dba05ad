//! Protobuf's text format, as far as a `projector_config.pbtxt` needs it: fields of strings,
//! words (numbers, enum names) and nested messages, repeated or in `[...]` lists, with `#`
//! comments. The tree keeps each field's line for the caller's messages; what the fields mean
//! is the caller's business.

/// One field as written: its name, the line it starts on (from 1) and its value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Field {
    pub(super) name: String,
    pub(super) line: usize,
    pub(super) value: FieldValue,
}

/// A field's value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum FieldValue {
    /// A string literal, or adjacent ones joined, unescaped.
    String(String),
    /// A number, `true`/`false` or an enum name, as written.
    Word(String),
    /// A nested message.
    Message(Vec<Field>),
    /// A `[a, b, ...]` list.
    List(Vec<FieldValue>),
}

/// Where and why the text is not protobuf's text format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SyntaxError {
    pub(super) line: usize,
    pub(super) problem: &'static str,
}

/// The fields of the message `text`, in order.
pub(super) fn parse(text: &str) -> Result<Vec<Field>, SyntaxError> {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        at: 0,
        line: 1,
        depth: 0,
    };
    parser.message(None)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    String(String),
    Punct(u8),
}

/// How deep messages and lists may nest: a projector config nests two deep; the limit keeps a
/// hostile file from exhausting the stack of this recursive parser.
const MAX_DEPTH: usize = 32;

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    line: usize,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, problem: &'static str) -> SyntaxError {
        SyntaxError {
            line: self.line,
            problem,
        }
    }

    /// Skips white space and comments; the next byte, if any.
    fn skip(&mut self) -> Option<u8> {
        while let Some(&b) = self.bytes.get(self.at) {
            match b {
                b'\n' => {
                    self.line += 1;
                    self.at += 1;
                }
                b' ' | b'\t' | b'\r' | b'\x0b' | b'\x0c' => self.at += 1,
                b'#' => {
                    while self.bytes.get(self.at).is_some_and(|&b| b != b'\n') {
                        self.at += 1;
                    }
                }
                _ => return Some(b),
            }
        }
        None
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip()
    }

    fn next(&mut self) -> Result<Option<Token>, SyntaxError> {
        let Some(b) = self.skip() else {
            return Ok(None);
        };
        if b == b'"' || b == b'\'' {
            return self.string(b).map(|s| Some(Token::String(s)));
        }
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'.') {
            let start = self.at;
            while self.bytes.get(self.at).is_some_and(|&b| {
                b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'.')
            }) {
                self.at += 1;
            }
            let word = String::from_utf8_lossy(&self.bytes[start..self.at]).into_owned();
            return Ok(Some(Token::Word(word)));
        }
        if b"{}<>[]:,;".contains(&b) {
            self.at += 1;
            return Ok(Some(Token::Punct(b)));
        }
        Err(self.error("an unexpected character"))
    }

    /// Fields up to `close` (or the end of the text for the outermost message).
    fn message(&mut self, close: Option<u8>) -> Result<Vec<Field>, SyntaxError> {
        let mut fields = Vec::new();
        loop {
            // The line of the field's name, past the space and comments before it.
            self.skip();
            let line = self.line;
            match self.next()? {
                None if close.is_none() => return Ok(fields),
                None => return Err(self.error("a message is not closed")),
                Some(Token::Punct(b)) if Some(b) == close => return Ok(fields),
                Some(Token::Punct(b',' | b';')) => {}
                Some(Token::Word(name)) => {
                    let value = self.field_value()?;
                    fields.push(Field { name, line, value });
                }
                Some(_) => return Err(self.error("a field name was expected")),
            }
        }
    }

    /// What follows a field's name: `: value`, or a message with or without the colon.
    fn field_value(&mut self) -> Result<FieldValue, SyntaxError> {
        if self.peek() == Some(b':') {
            self.at += 1;
        }
        match self.next()? {
            Some(Token::Punct(b'[')) => self.list(),
            Some(token) => self.value(token),
            None => Err(self.error("a value was expected")),
        }
    }

    fn value(&mut self, token: Token) -> Result<FieldValue, SyntaxError> {
        match token {
            Token::Punct(open @ (b'{' | b'<')) => {
                self.nest()?;
                let close = if open == b'{' { b'}' } else { b'>' };
                let fields = self.message(Some(close));
                self.depth -= 1;
                fields.map(FieldValue::Message)
            }
            Token::Word(word) => Ok(FieldValue::Word(word)),
            Token::String(mut string) => {
                // Adjacent literals are one string, as in C.
                while matches!(self.peek(), Some(b'"' | b'\'')) {
                    let quote = self.bytes[self.at];
                    string.push_str(&self.string(quote)?);
                }
                Ok(FieldValue::String(string))
            }
            Token::Punct(_) => Err(self.error("a value was expected")),
        }
    }

    fn nest(&mut self) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("messages or lists nest too deep"));
        }
        Ok(())
    }

    /// The items of a list, its `[` read.
    fn list(&mut self) -> Result<FieldValue, SyntaxError> {
        self.nest()?;
        let items = self.list_items();
        self.depth -= 1;
        items
    }

    fn list_items(&mut self) -> Result<FieldValue, SyntaxError> {
        let mut items = Vec::new();
        loop {
            match self.next()? {
                Some(Token::Punct(b']')) if items.is_empty() => break,
                Some(token) => items.push(self.value(token)?),
                None => return Err(self.error("a list is not closed")),
            }
            match self.next()? {
                Some(Token::Punct(b',')) => {}
                Some(Token::Punct(b']')) => break,
                _ => return Err(self.error("a list's items are separated by commas")),
            }
        }
        Ok(FieldValue::List(items))
    }

    /// A string literal starting at `quote`, unescaped: C's escapes, octal `\NNN`, hex `\xNN`
    /// and `\uNNNN`/`\UNNNNNNNN`; the bytes must be UTF-8.
    fn string(&mut self, quote: u8) -> Result<String, SyntaxError> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.bytes.get(self.at) else {
                return Err(self.error("a string is not closed"));
            };
            self.at += 1;
            match b {
                b'\n' => return Err(self.error("a string is not closed on its line")),
                b'\\' => self.escape(&mut out)?,
                b if b == quote => break,
                b => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| self.error("a string is not UTF-8"))
    }

    fn escape(&mut self, out: &mut Vec<u8>) -> Result<(), SyntaxError> {
        let Some(&b) = self.bytes.get(self.at) else {
            return Err(self.error("a string is not closed"));
        };
        self.at += 1;
        let simple = match b {
            b'a' => Some(0x07),
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(0x0b),
            b'\\' | b'\'' | b'"' | b'?' => Some(b),
            _ => None,
        };
        if let Some(byte) = simple {
            out.push(byte);
            return Ok(());
        }
        match b {
            b'0'..=b'7' => {
                let mut value = u32::from(b - b'0');
                for _ in 0..2 {
                    match self.bytes.get(self.at) {
                        Some(&d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            self.at += 1;
                        }
                        _ => break,
                    }
                }
                let byte =
                    u8::try_from(value).map_err(|_| self.error("an octal escape past 255"))?;
                out.push(byte);
            }
            b'x' => {
                let value = self.hex_digits(1, 2)?;
                out.push(value as u8);
            }
            b'u' | b'U' => {
                let digits = if b == b'u' { 4 } else { 8 };
                let value = self.hex_digits(digits, digits)?;
                let c = char::from_u32(value).ok_or(self.error("a \\u escape is no character"))?;
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            }
            _ => return Err(self.error("an unknown escape in a string")),
        }
        Ok(())
    }

    /// `min` to `max` hex digits as a number.
    fn hex_digits(&mut self, min: usize, max: usize) -> Result<u32, SyntaxError> {
        let mut value = 0u32;
        let mut count = 0;
        while count < max {
            let Some(digit) = self
                .bytes
                .get(self.at)
                .and_then(|&d| (d as char).to_digit(16))
            else {
                break;
            };
            value = value.wrapping_mul(16).wrapping_add(digit);
            self.at += 1;
            count += 1;
        }
        if count < min {
            return Err(self.error("a hex escape without its digits"));
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(w: &str) -> FieldValue {
        FieldValue::Word(w.into())
    }

    #[test]
    fn nested_messages_lists_and_escaped_strings_parse() {
        let text = "# a comment\nembeddings {\n  tensor_name: \"a\\tb\\\"c\\303\\251\" 'd'\n  \
                    tensor_shape: [60, 32]\n  sprite < single_image_dim: 8 single_image_dim: 8 >\n}\n\
                    model_checkpoint_path: '\\x41\\u00e9'\n";
        let fields = parse(text).unwrap();
        assert_eq!(fields.len(), 2);
        assert_eq!((fields[0].name.as_str(), fields[0].line), ("embeddings", 2));
        let FieldValue::Message(embedding) = &fields[0].value else {
            panic!("{:?}", fields[0]);
        };
        assert_eq!(embedding[0].value, FieldValue::String("a\tb\"céd".into()));
        assert_eq!(embedding[0].line, 3);
        assert_eq!(
            embedding[1].value,
            FieldValue::List(vec![word("60"), word("32")])
        );
        let FieldValue::Message(sprite) = &embedding[2].value else {
            panic!("{:?}", embedding[2]);
        };
        assert_eq!(sprite.len(), 2);
        assert_eq!(fields[1].value, FieldValue::String("Aé".into()));
    }

    #[test]
    fn broken_text_is_an_error_on_its_line() {
        let deep_messages = "a {".repeat(100_000);
        let deep_lists = "a: [{".repeat(100_000);
        for (text, line, problem) in [
            ("a {\n b: 1\n", 3, "a message is not closed"),
            ("a: \"open\nb: 1", 1, "a string is not closed on its line"),
            ("a: [1 2]", 1, "a list's items are separated by commas"),
            ("\n\n: 1", 3, "a field name was expected"),
            ("a: \"\\xff\"", 1, "a string is not UTF-8"),
            ("a: \"\\q\"", 1, "an unknown escape in a string"),
            ("a:", 1, "a value was expected"),
            (&deep_messages, 1, "messages or lists nest too deep"),
            (&deep_lists, 1, "messages or lists nest too deep"),
        ] {
            assert_eq!(parse(text), Err(SyntaxError { line, problem }), "{text:?}");
        }
    }
}
