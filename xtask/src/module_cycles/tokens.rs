//! Rust source as the check needs it: identifiers, `::` and punctuation with their lines,
//! comments and string, character and raw-string literals left out.

/// A token of Rust source, comments and literals left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The identifier at `i`, if the token there is one.
pub(crate) fn ident_at(tokens: &[(Token, usize)], i: usize) -> Option<&str> {
    match tokens.get(i) {
        Some((Token::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    }
}

/// Whether the token at `i` is `t`.
pub(crate) fn token_is(tokens: &[(Token, usize)], i: usize, t: &Token) -> bool {
    tokens.get(i).is_some_and(|(x, _)| x == t)
}

/// The tokens of `text` with their lines.
pub(crate) fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b' || c == 'c') && starts_string(&chars, i)) {
            i = skip_string(&chars, i, &mut line);
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push((
                Token::Ident(word.trim_start_matches("r#").to_string()),
                line,
            ));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push((Token::PathSep, line));
            i += 2;
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// Whether a string literal with a prefix (`r"`, `r#"`, `b"`, `br"`, `c"`) starts at `i`.
fn starts_string(chars: &[char], i: usize) -> bool {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return false;
    }
    let mut j = i;
    while j < chars.len() && matches!(chars[j], 'r' | 'b' | 'c') && j < i + 2 {
        j += 1;
    }
    while j < chars.len() && chars[j] == '#' {
        j += 1;
    }
    chars.get(j) == Some(&'"') && (j > i)
}

/// The index after the string literal at `i`.
fn skip_string(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    let mut raw = false;
    while chars[i] != '"' && chars[i] != '#' {
        raw |= chars[i] == 'r';
        i += 1;
    }
    let mut hashes = 0;
    while chars[i] == '#' {
        hashes += 1;
        i += 1;
    }
    i += 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if !raw => i += 2,
            '"' => {
                let closing = (1..=hashes).all(|h| chars.get(i + h) == Some(&'#'));
                i += 1;
                if closing {
                    return i + hashes;
                }
            }
            c => {
                *line += usize::from(c == '\n');
                i += 1;
            }
        }
    }
    i
}
