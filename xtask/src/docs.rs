//! `cargo xtask docs`: keeps README.md and docs/*.md true to the repository.
//!
//! 0. README.md stays short: at most 120 lines, no table cell over 200 characters.
//! 1. Every markdown link to a relative path names a file or directory that exists; a link's
//!    `#anchor` into a markdown file names one of its headings (GitHub's slugs).
//! 2. Every `pip install` line of a shell block installs exactly one of the pinned lists that CI
//!    tests (`compat.rs`, `browser.rs`), so that the install lines users copy are the tested ones.
//! 3. Every fenced shell block (```sh) runs, unless its first line says why it cannot here:
//!    `# needs: <what>` (a GPU, MPI, a bucket, the network, Slurm, …), `# long: <why>`, or
//!    `# ci: <step>`, a step `cargo xtask ci` runs itself (which must be one of its steps).
//!    A block runs under `bash -e -o pipefail` in a directory of its own under
//!    `target/docs-check` (inside the workspace, so that `cargo run` finds it), with `ember`
//!    the release binary built here first on `PATH`; a failure names the block's file:line
//!    and shows its output.
//! 4. Every table of figures in docs/benchmarks.md names the command that made it: between the
//!    heading or table before it and the table, a `cargo xtask …`, `cargo bench …`, `cargo run
//!    …`, `ember bench …` or `ember train …` in backticks or a shell block.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::process::{build, run_limited, target_dir};

const TASK: &str = "docs";

/// Fence info strings that mark a block of shell commands.
const SHELL_FENCES: &[&str] = &["sh", "bash", "shell"];

/// What a newcomer reads in five minutes: the README's length, and its longest table cell.
const README_MAX_LINES: usize = 120;
const README_MAX_CELL: usize = 200;

/// A fenced shell block: where it starts (the line after its fence, 1-based) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShellBlock {
    pub(crate) line: usize,
    pub(crate) text: String,
}

/// What the check does with a block, from the marker on its first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    Run,
    /// Cannot run here: the marker's reason.
    Skip(String),
    /// A step of `cargo xtask ci`, run there.
    CiStep(String),
}

/// A link in a markdown file: its line (1-based) and its target as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) line: usize,
    pub(crate) target: String,
}

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let files = markdown_files(root)?;
    let mut problems = Vec::new();
    let mut runnable = Vec::new();
    let mut skipped = 0;
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let mut found = broken_links(file, &text);
        if shown == "README.md" {
            found.extend(readme_too_long(&text));
        }
        if shown == "docs/benchmarks.md" {
            found.extend(figures_without_command(&text));
        }
        for block in shell_blocks(&text) {
            found.extend(untested_installs(&block));
            match plan(&block) {
                Plan::Run => runnable.push((shown.clone(), block)),
                Plan::Skip(why) => {
                    eprintln!("{TASK}: {shown}:{}: not run here ({why})", block.line);
                    skipped += 1;
                }
                Plan::CiStep(step) if crate::ci_steps::STEPS.contains(&step.as_str()) => {
                    eprintln!(
                        "{TASK}: {shown}:{}: a step of cargo xtask ci: {step}",
                        block.line
                    );
                    skipped += 1;
                }
                Plan::CiStep(step) => found.push(format!(
                    "{}: `# ci: {step}` is not a step of cargo xtask ci",
                    block.line
                )),
            }
        }
        problems.extend(found.into_iter().map(|p| format!("{shown}:{p}")));
    }
    if !problems.is_empty() {
        bail!(
            "{TASK}: {} problem(s):\n{}",
            problems.len(),
            problems.join("\n")
        );
    }
    build(root, &["build", "--release", "-p", "ember-cli"])?;
    let started = std::time::Instant::now();
    run_blocks(root, &runnable)?;
    eprintln!(
        "{TASK}: {} file(s): links and installs as tested; {} block(s) ran in {:.1} s, {skipped} \
         not run here (marked)",
        files.len(),
        runnable.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The commands a figure may name as what made it.
const FIGURE_COMMANDS: &[&str] = &[
    "cargo xtask ",
    "cargo bench ",
    "cargo run ",
    "ember bench ",
    "ember train ",
];

/// The tables of `markdown` with no command of [`FIGURE_COMMANDS`] (in backticks or a shell
/// block) between the heading or table before each and its header row: `line: …` each.
pub(crate) fn figures_without_command(markdown: &str) -> Vec<String> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut problems = Vec::new();
    let mut named = false;
    let mut in_code = false;
    let mut in_table = false;
    for (index, line) in lines.iter().enumerate() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let table_row = !in_code && line.starts_with('|');
        let heading = !in_code && line.starts_with('#');
        if heading || (in_table && !table_row) {
            named = false;
        }
        let header = table_row
            && !in_table
            && lines
                .get(index + 1)
                .is_some_and(|next| next.starts_with("|--"));
        if header && !named {
            problems.push(format!(
                "{}: a table of figures that names no command making it (`cargo xtask`, `cargo \
                 bench`, `cargo run`, `ember bench` or `ember train`, in backticks or a shell \
                 block, after the heading or table before it)",
                index + 1
            ));
        }
        in_table = table_row;
        let spans = match in_code {
            true => line.to_string(),
            false => line
                .split('`')
                .skip(1)
                .step_by(2)
                .collect::<Vec<_>>()
                .join("\n"),
        };
        let spans = FIGURE_COMMANDS
            .iter()
            .any(|command| spans.contains(command));
        named |= spans && !table_row;
    }
    problems
}

/// README.md and every markdown file of docs/, in a stable order.
fn markdown_files(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .context("reading docs/")?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    Ok(files)
}

/// Runs each block in a fresh directory of its own; the first failure is the error.
fn run_blocks(root: &Path, blocks: &[(String, ShellBlock)]) -> anyhow::Result<()> {
    let scratch = root.join("target/docs-check");
    let _ = std::fs::remove_dir_all(&scratch);
    let target = target_dir(root);
    let path = std::env::join_paths(
        std::iter::once(target.join("release")).chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        ),
    )?;
    for (index, (file, block)) in blocks.iter().enumerate() {
        let dir = scratch.join(format!("block-{index}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut command = Command::new("bash");
        command
            .args(["-e", "-o", "pipefail", "-c", &block.text])
            .current_dir(&dir)
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", &target);
        let what = format!("{file}:{}", block.line);
        eprintln!("{TASK}: running {what}");
        let ran = run_limited(command, &what, &scratch.join(format!("block-{index}.log")))?;
        if !ran.success {
            bail!(
                "{TASK}: the block at {what} failed ({}):\n{}\n--- its output:\n{}",
                ran.status,
                block.text,
                ran.output
            );
        }
    }
    Ok(())
}

/// Where the README outgrows five minutes: more than [`README_MAX_LINES`] lines, or a table
/// cell longer than [`README_MAX_CELL`] characters (its content belongs on a docs page).
pub(crate) fn readme_too_long(markdown: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let lines = markdown.lines().count();
    if lines > README_MAX_LINES {
        problems.push(format!(
            "{lines}: {lines} lines, over {README_MAX_LINES}: move a section to docs/"
        ));
    }
    for (index, line) in markdown.lines().enumerate() {
        if !line.trim_start().starts_with('|') {
            continue;
        }
        if let Some(cell) = line
            .split('|')
            .find(|c| c.trim().chars().count() > README_MAX_CELL)
        {
            problems.push(format!(
                "{}: a table cell of {} characters, over {README_MAX_CELL}",
                index + 1,
                cell.trim().chars().count()
            ));
        }
    }
    problems
}

/// Every fenced block whose info string names a shell, outside any other fence.
pub(crate) fn shell_blocks(markdown: &str) -> Vec<ShellBlock> {
    let mut blocks = Vec::new();
    let mut open: Option<(bool, ShellBlock)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let language = info.split_whitespace().next().unwrap_or("");
                    let block = ShellBlock {
                        line: index + 2,
                        text: String::new(),
                    };
                    open = Some((SHELL_FENCES.contains(&language), block));
                }
            }
            Some((is_shell, block)) if trimmed.starts_with("```") => {
                if is_shell {
                    blocks.push(block);
                }
            }
            Some((is_shell, mut block)) => {
                block.text.push_str(line);
                block.text.push('\n');
                open = Some((is_shell, block));
            }
        }
    }
    blocks
}

/// The plan a block's first line asks for.
pub(crate) fn plan(block: &ShellBlock) -> Plan {
    let first = block.text.lines().next().unwrap_or("").trim();
    let Some(marker) = first.strip_prefix('#').map(str::trim) else {
        return Plan::Run;
    };
    if let Some(why) = marker.strip_prefix("needs:") {
        Plan::Skip(format!("needs {}", why.trim()))
    } else if let Some(why) = marker.strip_prefix("long:") {
        Plan::Skip(format!("long: {}", why.trim()))
    } else if let Some(step) = marker.strip_prefix("ci:") {
        Plan::CiStep(step.trim().to_string())
    } else {
        Plan::Run
    }
}

/// The `pip install` lines of a block that install anything but one of CI's pinned lists.
pub(crate) fn untested_installs(block: &ShellBlock) -> Vec<String> {
    let tested: [&[&str]; 4] = [
        crate::pins::COMPAT_REQUIREMENTS,
        crate::pins::MINDINSIGHT_REQUIREMENTS,
        crate::pins::MINDINSIGHT_WEB_REQUIREMENTS,
        crate::pins::BROWSER_REQUIREMENTS,
    ];
    let mut problems = Vec::new();
    for (offset, line) in block.text.lines().enumerate() {
        let Some((_, rest)) = line.split_once("pip install") else {
            continue;
        };
        let command = rest.split(['#', ';', '&', '|']).next().unwrap_or("");
        let packages: Vec<&str> = command.split_whitespace().collect();
        if !tested.contains(&packages.as_slice()) {
            problems.push(format!(
                "{}: `pip install {}` is not one of the lists CI installs and tests \
                 (compat.rs, browser.rs): {tested:?}",
                block.line + offset,
                packages.join(" ")
            ));
        }
    }
    problems
}

/// Every inline link `[text](target)` outside fenced blocks and code spans.
pub(crate) fn links(markdown: &str) -> Vec<Link> {
    let mut found = Vec::new();
    let mut in_fence = false;
    for (index, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let prose = without_code_spans(line);
        let mut rest = prose.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push(Link {
                line: index + 1,
                target: target.to_string(),
            });
            rest = &after[end..];
        }
    }
    found
}

/// `line` with every `code span` emptied, so that code showing link syntax is no link.
fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 0 { part } else { "" })
        .collect::<Vec<_>>()
        .join("``")
}

/// The links of `file` (whose text is `markdown`) to a path that does not exist, or to an
/// anchor its markdown target lacks, each as `line: why`.
pub(crate) fn broken_links(file: &Path, markdown: &str) -> Vec<String> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    for link in links(markdown) {
        let target = link.target.as_str();
        if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target, None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !resolved.exists() {
            problems.push(format!("{}: link to {target}: no such path", link.line));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if resolved.extension().is_none_or(|ext| ext != "md") {
            continue;
        }
        let headings = std::fs::read_to_string(&resolved)
            .map(|text| heading_slugs(&text))
            .unwrap_or_default();
        if !headings.contains(anchor) {
            problems.push(format!(
                "{}: link to {target}: {} has no heading with that anchor",
                link.line,
                resolved.display()
            ));
        }
    }
    problems
}

/// The anchors GitHub gives a markdown file's headings (outside fences).
pub(crate) fn heading_slugs(markdown: &str) -> BTreeSet<String> {
    let mut slugs = BTreeSet::new();
    let mut in_fence = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence && line.starts_with('#') {
            let title = line.trim_start_matches('#');
            if title.starts_with(' ') {
                slugs.insert(slug(title.trim()));
            }
        }
    }
    slugs
}

/// GitHub's anchor for a heading: lowercase, spaces to hyphens, punctuation other than `-` and
/// `_` dropped.
pub(crate) fn slug(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(text: &str) -> ShellBlock {
        ShellBlock {
            line: 10,
            text: text.to_string(),
        }
    }

    #[test]
    fn shell_blocks_are_found_with_their_first_line_and_other_fences_left_out() {
        let markdown = "# t\n\n```sh\nember train\nember inspect x\n```\n\n```text\nnot me\n```\n\
                        ```rust\nlet a = 1;\n```\n```bash\n# needs: gpu\nnvidia-smi\n```\n";
        let blocks = shell_blocks(markdown);
        assert_eq!(
            blocks,
            vec![
                ShellBlock {
                    line: 4,
                    text: "ember train\nember inspect x\n".into()
                },
                ShellBlock {
                    line: 15,
                    text: "# needs: gpu\nnvidia-smi\n".into()
                },
            ]
        );
    }

    #[test]
    fn a_blocks_marker_decides_whether_it_runs() {
        assert_eq!(plan(&block("ember train\n")), Plan::Run);
        assert_eq!(plan(&block("# a comment\nember train\n")), Plan::Run);
        assert_eq!(
            plan(&block("# needs: mpi (Open MPI)\nmpirun -n 2 ember train\n")),
            Plan::Skip("needs mpi (Open MPI)".into())
        );
        assert_eq!(
            plan(&block("# long: an hour\nember train --epochs 1000000\n")),
            Plan::Skip("long: an hour".into())
        );
        assert_eq!(
            plan(&block(
                "# ci: cargo test --workspace\ncargo test --workspace\n"
            )),
            Plan::CiStep("cargo test --workspace".into())
        );
    }

    #[test]
    fn only_the_pinned_lists_ci_tests_may_be_installed() {
        let tested = format!(
            "pip install {}\n",
            crate::pins::MINDINSIGHT_WEB_REQUIREMENTS.join(" ")
        );
        assert!(untested_installs(&block(&tested)).is_empty());
        let with_comment = format!(
            "pip install {}   # TensorBoard\n",
            crate::pins::COMPAT_REQUIREMENTS.join(" ")
        );
        assert!(untested_installs(&block(&with_comment)).is_empty());
        let loose = block("python3 -m venv v\npip install mindinsight==2.3.1 \"numpy<2\"\n");
        let problems = untested_installs(&loose);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("11: "), "{problems:?}");
    }

    #[test]
    fn a_readme_over_its_length_or_with_a_long_table_cell_is_reported() {
        let short = "# ember\n\n| a | b |\n|---|---|\n| yes | no |\n";
        assert!(readme_too_long(short).is_empty());
        let long = "line\n".repeat(README_MAX_LINES + 1);
        assert_eq!(readme_too_long(&long).len(), 1);
        let wide = format!("# ember\n| row | {} |\n", "x".repeat(README_MAX_CELL + 1));
        let problems = readme_too_long(&wide);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("2: a table cell of 201"),
            "{problems:?}"
        );
    }

    #[test]
    fn links_are_found_outside_code_with_their_lines() {
        let markdown = "see [a](docs/a.md) and [`b`](b.md#part)\n```sh\n[x](nope.md)\n```\n\
                        `[y](code.md)` and <https://example.com> and [w](https://x.org/a)\n";
        let found: Vec<(usize, String)> = links(markdown)
            .into_iter()
            .map(|l| (l.line, l.target))
            .collect();
        assert_eq!(
            found,
            vec![
                (1, "docs/a.md".into()),
                (1, "b.md#part".into()),
                (5, "https://x.org/a".into()),
            ]
        );
    }

    #[test]
    fn slugs_follow_githubs_anchors() {
        assert_eq!(
            slug("Data parallel: 1 and 2 workers, ember against burn-train"),
            "data-parallel-1-and-2-workers-ember-against-burn-train"
        );
        assert_eq!(slug("`ember inspect`"), "ember-inspect");
        assert_eq!(
            slug("Batching, durability and accounting"),
            "batching-durability-and-accounting"
        );
    }

    #[test]
    fn a_missing_path_or_anchor_is_reported_and_a_present_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("docs")).unwrap();
        std::fs::write(
            dir.path().join("docs/usage.md"),
            "# Usage\n\n## Exit codes\n",
        )
        .unwrap();
        let readme = dir.path().join("README.md");
        let markdown = "[u](docs/usage.md) [e](docs/usage.md#exit-codes) [d](docs)\n\
                        [gone](docs/gone.md)\n[bad](docs/usage.md#no-such-part) [self](#x)\n\n# X\n";
        std::fs::write(&readme, markdown).unwrap();
        let problems = broken_links(&readme, markdown);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("2: link to docs/gone.md: no such path"));
        assert!(problems[1].starts_with("3: link to docs/usage.md#no-such-part"));
    }

    #[test]
    fn the_repositorys_readme_is_short_and_its_docs_have_no_broken_link_or_untested_install() {
        let root = crate::workspace_root();
        for file in markdown_files(&root).unwrap() {
            let text = std::fs::read_to_string(&file).unwrap();
            assert_eq!(
                broken_links(&file, &text),
                Vec::<String>::new(),
                "{}",
                file.display()
            );
            for block in shell_blocks(&text) {
                assert!(untested_installs(&block).is_empty(), "{}", file.display());
                if let Plan::CiStep(step) = plan(&block) {
                    assert!(crate::ci_steps::STEPS.contains(&step.as_str()), "{step}");
                }
            }
        }
    }

    #[test]
    fn a_table_of_figures_must_name_the_command_that_made_it() {
        let doc = "# Bench\n\n`cargo xtask bench --rounds 5`, 2026-12-07:\n\n| a | b |\n|---|---|\n\
                   | 1 | 2 |\n\nThe same run, by workload:\n\n| c |\n|---|\n| 3 |\n\n\
                   ## Else\n\n```sh\ncargo bench -p ember --bench checkpoint\n```\n\n| d |\n|---|\n\
                   \n### By hand\n\nTimed with `time`:\n\n| e |\n|---|\n";
        assert_eq!(
            figures_without_command(doc),
            [11, 28].map(|line| format!(
                "{line}: a table of figures that names no command making it (`cargo xtask`, \
                 `cargo bench`, `cargo run`, `ember bench` or `ember train`, in backticks or a \
                 shell block, after the heading or table before it)"
            ))
        );
        let root = crate::workspace_root();
        let benchmarks = std::fs::read_to_string(root.join("docs/benchmarks.md")).unwrap();
        assert_eq!(figures_without_command(&benchmarks), Vec::<String>::new());
    }

    #[test]
    fn a_failing_block_is_named_by_file_and_line_with_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let blocks = vec![(
            "docs/x.md".to_string(),
            ShellBlock {
                line: 7,
                text: "echo before\nfalse\necho after\n".into(),
            },
        )];
        let error = run_blocks(dir.path(), &blocks).unwrap_err().to_string();
        assert!(error.contains("docs/x.md:7 failed"), "{error}");
        assert!(
            error.contains("before") && !error.contains("\nafter"),
            "{error}"
        );
    }
}
