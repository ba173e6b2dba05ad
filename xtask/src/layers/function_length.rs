//! The length rule: no function in any workspace crate's `src` (each `crates/*/src`,
//! `xtask/src` and `tests/src`; generated code in a `generated/` folder aside) is longer than
//! [`MAX_LINES`], so that each step of a job stays a function a reader can find by name and
//! read whole.
//!
//! A function's length is counted from the line of its `fn` to the line of its closing brace,
//! on tokens (comments and literals left out); declarations without a body do not count.
//!
//! A longer function is let through only where a comment directly above it (among its doc
//! comments and one-line attributes, no blank line between) says why: `// length: <why>`, the
//! why not empty. It is for the rare function that is one thing read best whole (a long table, a test
//! that is one scenario top to bottom), never for one that does several jobs. An exception on a
//! function within the limit is reported too, so that none outlives its reason.
//!
//! Nor is any source file, its crate's tests included, longer than [`MAX_FILE_LINES`]: a file
//! that long holds several jobs, each of which reads better in a file named after it.

use std::path::Path;

use crate::module_cycles::tokens::{Token, tokens};
use crate::module_cycles::{read_sources, source_roots};

/// The most lines a function may take.
pub(crate) const MAX_LINES: usize = 80;

/// The most lines a source file may take (generated code aside).
pub(crate) const MAX_FILE_LINES: usize = 650;

/// The comment that lets a function be longer, followed by why.
const EXCEPTION: &str = "// length:";

/// A function let through over [`MAX_LINES`] by its `// length:` comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exception {
    /// `crates/ember/src/read/scan.rs:12: `fn name` is 95 lines`.
    pub(crate) place: String,
    pub(crate) why: String,
}

/// What the rule finds in the workspace: problem lines, and the functions let through.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) problems: Vec<String>,
    pub(crate) exceptions: Vec<Exception>,
}

/// Checks every crate's `src` under `root`, and the length of every file of its `src` and
/// its tests.
pub(crate) fn check(root: &Path) -> anyhow::Result<Findings> {
    let mut findings = Findings::default();
    for src in source_roots(root)? {
        for file in read_sources(&root.join(&src))? {
            let path = src.join(&file.path);
            let path = path.display().to_string().replace('\\', "/");
            check_text(&path, &file.text, MAX_LINES, &mut findings);
            check_file_length(&path, &file.text, &mut findings);
        }
    }
    for tests in test_roots(root)? {
        for file in read_sources(&root.join(&tests))? {
            let path = tests.join(&file.path);
            let path = path.display().to_string().replace('\\', "/");
            check_file_length(&path, &file.text, &mut findings);
        }
    }
    Ok(findings)
}

/// Every crate's `tests` folder (the workspace's `tests/tests` too), relative to `root`.
fn test_roots(root: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut roots: Vec<std::path::PathBuf> = source_roots(root)?
        .into_iter()
        .filter_map(|src| Some(src.parent()?.join("tests")))
        .filter(|tests| root.join(tests).is_dir())
        .collect();
    roots.sort();
    roots.dedup();
    Ok(roots)
}

/// Adds a problem to `findings` when `text` (the file at `path`) is over [`MAX_FILE_LINES`].
fn check_file_length(path: &str, text: &str, findings: &mut Findings) {
    let lines = text.lines().count();
    if lines > MAX_FILE_LINES {
        findings.problems.push(format!(
            "{path}: {lines} lines (a file at most {MAX_FILE_LINES}: split it by job)"
        ));
    }
}

/// Adds what `text` (the file at `path`) holds against a limit of `max` lines to `findings`.
fn check_text(path: &str, text: &str, max: usize, findings: &mut Findings) {
    let lines: Vec<&str> = text.lines().collect();
    for function in functions(text) {
        let place = format!(
            "{path}:{}: `fn {}` is {} lines",
            function.line, function.name, function.lines
        );
        let over = function.lines > max;
        match (exception_above(&lines, function.line), over) {
            (None, false) => {}
            (None, true) => findings.problems.push(format!(
                "{place} (at most {max}; a longer one says why in a `{EXCEPTION} <why>` comment \
                 above it)"
            )),
            (Some(why), true) if !why.is_empty() => {
                findings.exceptions.push(Exception { place, why });
            }
            (Some(_), true) => findings.problems.push(format!(
                "{place} (at most {max}) and its `{EXCEPTION}` comment gives no reason"
            )),
            (Some(_), false) => findings.problems.push(format!(
                "{place}, within {max}: its `{EXCEPTION}` comment is no longer needed"
            )),
        }
    }
}

/// A function with a body: its name, the line of its `fn` and how many lines it spans.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

/// Every function of `text` that has a body.
fn functions(text: &str) -> Vec<Function> {
    let tokens = tokens(text);
    let mut found = Vec::new();
    for (i, (token, line)) in tokens.iter().enumerate() {
        let (Token::Ident(keyword), Some((Token::Ident(name), _))) = (token, tokens.get(i + 1))
        else {
            continue;
        };
        if keyword != "fn" {
            continue;
        }
        if let Some(end) = body_end(&tokens[i + 2..]) {
            found.push(Function {
                name: name.clone(),
                line: *line,
                lines: end + 1 - line,
            });
        }
    }
    found
}

/// The why of a `// length:` comment directly above the function whose `fn` is on line
/// `fn_line` (1-based): the run of comment and attribute lines right above it is searched.
fn exception_above(lines: &[&str], fn_line: usize) -> Option<String> {
    lines[..fn_line.saturating_sub(1).min(lines.len())]
        .iter()
        .rev()
        .map(|line| line.trim())
        .take_while(|line| line.starts_with("//") || line.starts_with("#["))
        .find_map(|line| line.strip_prefix(EXCEPTION))
        .map(|why| why.trim().to_string())
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
    fn a_file_over_the_limit_is_named_with_its_length() {
        let mut findings = Findings::default();
        check_file_length("a.rs", &"x\n".repeat(MAX_FILE_LINES), &mut findings);
        assert!(findings.problems.is_empty());
        check_file_length("b.rs", &"x\n".repeat(MAX_FILE_LINES + 1), &mut findings);
        assert_eq!(
            findings.problems,
            ["b.rs: 651 lines (a file at most 650: split it by job)"]
        );
    }

    /// A function `name` of `body_lines` body lines, so `body_lines + 2` lines in all, with
    /// `above` written on the lines right above it.
    fn function(above: &str, name: &str, body_lines: usize) -> String {
        let body = "    let x = 1;\n".repeat(body_lines);
        format!("{above}fn {name}() {{\n{body}}}\n")
    }

    fn findings(text: &str, max: usize) -> Findings {
        let mut findings = Findings::default();
        check_text("src/lib.rs", text, max, &mut findings);
        findings
    }

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
        let long: Vec<_> = functions(&text)
            .into_iter()
            .filter(|f| f.lines > 7)
            .collect();
        let expected = Function {
            name: "long".to_string(),
            line: 6,
            lines: 8,
        };
        assert_eq!(long, vec![expected]);
        assert_eq!(
            findings(&text, 7).problems,
            vec![
                "src/lib.rs:6: `fn long` is 8 lines (at most 7; a longer one says why in a \
                 `// length: <why>` comment above it)"
                    .to_string()
            ]
        );
        assert!(findings(&text, 8).problems.is_empty());
    }

    #[test]
    fn an_exception_with_a_reason_lets_a_long_function_through_and_is_named() {
        let above = "/// Docs.\n// length: one scenario, read top to bottom\n#[test]\n";
        let found = findings(&function(above, "scenario", 9), 10);
        assert_eq!(found.problems, Vec::<String>::new());
        assert_eq!(
            found.exceptions,
            vec![Exception {
                place: "src/lib.rs:4: `fn scenario` is 11 lines".to_string(),
                why: "one scenario, read top to bottom".to_string(),
            }]
        );
    }

    #[test]
    fn an_exception_without_a_reason_is_refused() {
        let found = findings(&function("// length:  \n", "bare", 9), 10);
        assert_eq!(
            found.problems,
            vec![
                "src/lib.rs:2: `fn bare` is 11 lines (at most 10) and its `// length:` comment \
                 gives no reason"
                    .to_string()
            ]
        );
        assert!(found.exceptions.is_empty());
    }

    #[test]
    fn an_exception_is_read_only_directly_above_its_function() {
        // A blank line or code between the comment and the function ends the search.
        for above in [
            "// length: a table\n\n",
            "// length: a table\nconst A: u8 = 1;\n",
        ] {
            let found = findings(&function(above, "table", 9), 10);
            assert_eq!(found.problems.len(), 1, "{above:?}: {:?}", found.problems);
            assert!(found.exceptions.is_empty());
        }
        // The exception of one function does not carry over to the next.
        let text = function("// length: a table\n", "first", 9) + &function("", "second", 9);
        let found = findings(&text, 10);
        assert_eq!(found.exceptions.len(), 1);
        assert_eq!(found.problems.len(), 1);
        assert!(
            found.problems[0].contains("`fn second`"),
            "{:?}",
            found.problems
        );
    }

    #[test]
    fn an_exception_on_a_short_function_is_reported_as_stale() {
        let found = findings(&function("// length: it used to be long\n", "short", 3), 10);
        assert_eq!(
            found.problems,
            vec![
                "src/lib.rs:2: `fn short` is 5 lines, within 10: its `// length:` comment is no \
                 longer needed"
                    .to_string()
            ]
        );
    }

    #[test]
    fn generated_code_is_not_ruled() {
        let root = tempfile::tempdir().expect("a tempdir");
        let src = root.path().join("crates/made/src");
        std::fs::create_dir_all(src.join("generated")).expect("the folders");
        std::fs::write(
            src.join("generated/proto.rs"),
            function("", "generated", 200),
        )
        .expect("the generated file");
        std::fs::write(src.join("lib.rs"), function("", "written", 200)).expect("the lib");
        let found = check(root.path()).expect("the check runs");
        assert_eq!(
            found.problems,
            vec![
                "crates/made/src/lib.rs:1: `fn written` is 202 lines (at most 80; a longer one \
                 says why in a `// length: <why>` comment above it)"
                    .to_string()
            ]
        );
    }

    #[test]
    fn no_function_in_the_workspace_is_over_the_limit() {
        let found = check(&crate::workspace_root()).expect("the check runs");
        assert_eq!(found.problems, Vec::<String>::new());
    }
}
