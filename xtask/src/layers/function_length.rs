//! The length rule for the Trainer's loop: no function in `crates/ember/src/trainer/` is longer
//! than [`MAX_LINES`], so that each phase of a run (start, a step, a checkpoint, an epoch's
//! end, the finish) stays a function a reader can find by name and read whole.
//!
//! A function's length is counted from the line of its `fn` to the line of its closing brace,
//! on tokens (comments and literals left out); declarations without a body do not count.

use std::path::Path;

use crate::module_cycles::read_sources;
use crate::module_cycles::tokens::{Token, tokens};

/// The folders the rule holds in, relative to the workspace root.
pub(crate) const RULED: [&str; 1] = ["crates/ember/src/trainer"];

/// The most lines a function there may take.
pub(crate) const MAX_LINES: usize = 80;

/// A problem line for every function over [`MAX_LINES`] in the [`RULED`] folders.
pub(crate) fn check(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    for folder in RULED {
        for file in read_sources(&root.join(folder))? {
            for (name, line, lines) in long_functions(&file.text, MAX_LINES) {
                problems.push(format!(
                    "{folder}/{}:{line}: `fn {name}` is {lines} lines (at most {MAX_LINES})",
                    file.path.display()
                ));
            }
        }
    }
    Ok(problems)
}

/// Every function of `text` longer than `max` lines: its name, first line and length.
fn long_functions(text: &str, max: usize) -> Vec<(String, usize, usize)> {
    let tokens = tokens(text);
    let mut long = Vec::new();
    for (i, (token, line)) in tokens.iter().enumerate() {
        let (Token::Ident(keyword), Some((Token::Ident(name), _))) = (token, tokens.get(i + 1))
        else {
            continue;
        };
        if keyword != "fn" {
            continue;
        }
        if let Some(end) = body_end(&tokens[i + 2..]) {
            let lines = end + 1 - line;
            if lines > max {
                long.push((name.clone(), *line, lines));
            }
        }
    }
    long
}

/// The line of the brace that closes the body after a signature, or `None` for a declaration
/// (`;` before any body) or unbalanced text.
fn body_end(after_name: &[(Token, usize)]) -> Option<usize> {
    let mut parens = 0i32;
    let mut braces = 0i32;
    for (token, line) in after_name {
        match token {
            Token::Punct('(' | '[') => parens += 1,
            Token::Punct(')' | ']') => parens -= 1,
            Token::Punct(';') if braces == 0 && parens == 0 => return None,
            Token::Punct('{') if parens == 0 || braces > 0 => braces += 1,
            Token::Punct('}') if braces > 0 => {
                braces -= 1;
                if braces == 0 {
                    return Some(*line);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_body_is_found_and_declarations_and_fn_types_are_not() {
        let body = "    let x = 1;\n".repeat(5);
        let text = format!(
            "trait T {{\n    fn declared(&self);\n}}\n\
             type F = Box<dyn Fn(u8) -> u8>;\n\
             fn short() {{}}\n\
             fn long(a: fn(u8) -> u8) -> u8 {{\n{body}    a(\"{{\".len() as u8) // }}\n}}\n"
        );
        // `long` spans its line, six body lines and the closing brace: 8; the braces inside
        // the string and the comment are not counted.
        assert_eq!(long_functions(&text, 7), vec![("long".to_string(), 6, 8)]);
        assert!(long_functions(&text, 8).is_empty());
    }

    #[test]
    fn no_function_of_the_trainer_is_over_the_limit() {
        let root = crate::workspace_root();
        assert_eq!(check(&root).expect("the check runs"), Vec::<String>::new());
    }
}
