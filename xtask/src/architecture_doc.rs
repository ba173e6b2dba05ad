//! Keeps `docs/architecture.md` true to the tree and short: every path it names exists, no
//! line is over 200 characters, and the file stays within 8 KiB. `cargo xtask layers` (and so
//! CI) runs it.
//!
//! Why: the doc is where a newcomer starts, and one that names a file which has since become
//! a folder, or been renamed, sends them nowhere. The previous doc grew to 25 KB, with lines of
//! 1,800 characters and names gone stale, and nothing said so; checked here, a rename that
//! breaks a path in the doc fails the same change, which then fixes the doc.
//!
//! The rule for what counts as a path: an inline code span (text between backticks on one
//! line, outside ``` fences) whose text starts with `crates/`, `xtask/`, `tests/`, `docs/` or
//! `.ci/`, taken from the workspace root. It must exist, and one ending in `/` must be a
//! folder. A span that starts so but holds a space, a glob or template character (`*?[]{}<>…`)
//! or a `..` part is refused as well: the doc names real files and folders only, so that each
//! can be checked. Other spans (types, functions, commands like `cargo xtask layers`) are not
//! paths and are left alone.

use std::path::Path;

use anyhow::Context;

const DOC: &str = "docs/architecture.md";
/// Long enough for one sentence naming two paths; a longer line is a paragraph to split.
const MAX_LINE_CHARS: usize = 200;
/// Crates, invariants and entry points fit; past this the doc is growing into a second copy
/// of the code's own docs, which is how it went stale before.
const MAX_BYTES: usize = 8192;
const PATH_STARTS: [&str; 5] = ["crates/", "xtask/", "tests/", "docs/", ".ci/"];

/// Every problem of the workspace's `docs/architecture.md`, one line each.
pub(crate) fn check(root: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(root.join(DOC)).with_context(|| format!("reading {DOC}"))?;
    Ok(problems(root, &text))
}

/// The problems of `text`, read as `docs/architecture.md` with paths taken from `root`.
fn problems(root: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if text.len() > MAX_BYTES {
        problems.push(format!(
            "{DOC} is {} bytes, over {MAX_BYTES}: keep it to crates, invariants and entry points",
            text.len()
        ));
    }
    let mut fenced = false;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let chars = line.chars().count();
        if chars > MAX_LINE_CHARS {
            problems.push(format!(
                "{DOC}:{number}: a line of {chars} characters, over {MAX_LINE_CHARS}"
            ));
        }
        // A fence holds a picture or an example, where backticks are characters, not spans.
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for span in line.split('`').skip(1).step_by(2) {
            if let Some(problem) = path_problem(root, span) {
                problems.push(format!("{DOC}:{number}: `{span}` {problem}"));
            }
        }
    }
    problems
}

/// Why `span` is not a path that exists; `None` when it is one, or names no path at all.
fn path_problem(root: &Path, span: &str) -> Option<&'static str> {
    if !PATH_STARTS.iter().any(|start| span.starts_with(start)) {
        return None;
    }
    let pattern = span
        .chars()
        .any(|c| c.is_whitespace() || "*?[]{}<>…".contains(c));
    if pattern || span.split('/').any(|part| part == "..") {
        return Some("is not a plain path: name a file or folder the check can find");
    }
    let path = root.join(span);
    if span.ends_with('/') {
        (!path.is_dir()).then_some("is not a folder in the workspace")
    } else {
        (!path.exists()).then_some("does not exist in the workspace")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real_doc() -> (std::path::PathBuf, String) {
        let root = crate::workspace_root();
        let text = std::fs::read_to_string(root.join(DOC)).expect("the doc reads");
        (root, text)
    }

    #[test]
    fn the_real_doc_names_only_paths_that_exist() {
        let root = crate::workspace_root();
        assert_eq!(check(&root).expect("the check runs"), Vec::<String>::new());
    }

    #[test]
    fn a_wrong_path_planted_in_the_doc_is_named_with_its_line() {
        let (root, text) = real_doc();
        // The doc's first path, moved into a crate that does not exist: what a rename does.
        let (index, line) = (text.lines().enumerate())
            .find(|(_, line)| line.contains("`crates/"))
            .expect("the doc names a crate's path");
        let span = (line.split('`').skip(1).step_by(2))
            .find(|span| span.starts_with("crates/"))
            .expect("a span on that line");
        let planted = span.replacen("crates/", "crates/no-such-crate/", 1);
        let text = text.replacen(&format!("`{span}`"), &format!("`{planted}`"), 1);
        assert_eq!(
            problems(&root, &text),
            [format!(
                "docs/architecture.md:{}: `{planted}` does not exist in the workspace",
                index + 1
            )]
        );
    }

    #[test]
    fn a_file_named_as_a_folder_and_a_pattern_are_refused() {
        let root = crate::workspace_root();
        let text = "`xtask/src/main.rs/` and `crates/*/src/lib.rs`\n\
                    `xtask/src/` and `.ci/run` exist; `cargo xtask layers` and `Trainer::fit` are no paths\n";
        assert_eq!(
            problems(&root, text),
            [
                "docs/architecture.md:1: `xtask/src/main.rs/` is not a folder in the workspace",
                "docs/architecture.md:1: `crates/*/src/lib.rs` is not a plain path: name a file or \
                 folder the check can find",
            ]
        );
    }

    #[test]
    fn a_fence_is_a_picture_not_a_path() {
        let root = crate::workspace_root();
        let text = "```\nsummary `crates/nowhere/` ──▶ disk\n```\n`crates/nowhere`\n";
        assert_eq!(
            problems(&root, text),
            ["docs/architecture.md:4: `crates/nowhere` does not exist in the workspace"]
        );
    }

    #[test]
    fn a_long_line_and_a_long_doc_are_reported() {
        let root = crate::workspace_root();
        let line = "é".repeat(MAX_LINE_CHARS);
        assert_eq!(problems(&root, &line), Vec::<String>::new());
        let text = format!("{line}x\n").repeat(40);
        let found = problems(&root, &text);
        assert_eq!(found.len(), 41);
        let size = format!("docs/architecture.md is {} bytes, over 8192", text.len());
        assert!(found[0].starts_with(&size), "{}", found[0]);
        assert_eq!(
            found[1],
            "docs/architecture.md:1: a line of 201 characters, over 200"
        );
    }
}
