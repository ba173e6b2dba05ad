//! No xtask task imports another: a task is a module `main.rs` dispatches one of its `Task`s
//! to (with its folder), and it builds only on the shared modules
//! (`process`, `venv`, `pins`, `readers`, `mpirun`, `runs`, `server`, …). Where two tasks need
//! one thing, it moves to a shared module, so that a scenario is never reached by way of
//! another task's internals, and a task can change without breaking a second one.

use std::collections::BTreeSet;
use std::path::Path;

use crate::module_cycles::read_sources;

/// Every import of one task by another in `xtask/src` under `root`, one line each.
pub(crate) fn check(root: &Path) -> anyhow::Result<Vec<String>> {
    let src = root.join("xtask/src");
    let files = read_sources(&src)?;
    let main = files
        .iter()
        .find(|file| file.path == Path::new("main.rs"))
        .map(|file| file.text.as_str())
        .unwrap_or_default();
    let tasks = dispatched(main);
    let mut problems = Vec::new();
    for file in &files {
        let Some(owner) = owner(&file.path) else {
            continue;
        };
        if !tasks.contains(&owner) {
            continue;
        }
        for used in crate_modules(&file.text) {
            if used != owner && tasks.contains(&used) {
                problems.push(format!(
                    "xtask/src/{}: task `{owner}` imports task `{used}` (move what both need \
                     into a shared module)",
                    file.path.display()
                ));
            }
        }
    }
    Ok(problems)
}

/// The modules `main`'s task arms call into: `Task::Live => resume::live::run(&root)` is
/// `resume`.
fn dispatched(main: &str) -> BTreeSet<String> {
    main.lines()
        .filter(|line| line.trim_start().starts_with("Task::") || line.contains("} =>"))
        .filter_map(|line| line.split_once("=> ").map(|(_, call)| call))
        .filter_map(|call| call.split_once("::").map(|(module, _)| module.trim()))
        .filter(|module| module.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_owned)
        .collect()
}

/// The top module a file of `xtask/src` belongs to (`mpi/launch.rs` is `mpi`); `None` for
/// `main.rs`, which dispatches to every task.
fn owner(path: &Path) -> Option<String> {
    let first = path.components().next()?.as_os_str().to_str()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    (module != "main").then(|| module.to_owned())
}

/// The top modules `text` names as `crate::module` or in `use crate::{a, b::c}`.
fn crate_modules(text: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            used.extend(group.split(',').filter_map(|item| first_name(item.trim())));
        } else if let Some(name) = first_name(rest) {
            used.insert(name);
        }
    }
    used
}

fn first_name(path: &str) -> Option<String> {
    let name: String = path
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_importing_another_is_named_and_shared_modules_are_not() {
        let root = tempfile::tempdir().unwrap();
        let src = root.path().join("xtask/src");
        std::fs::create_dir_all(src.join("slurm")).unwrap();
        let main = "fn main() {\n    match task {\n        Task::Mpi => mpi::run(&root),\n        \
                    Task::Slurm => slurm::run(&root),\n        Task::Objects {\n            \
                    bench: true,\n        } => objects::bench::run(&root),\n    }\n}\n";
        std::fs::write(src.join("main.rs"), main).unwrap();
        std::fs::write(src.join("mpi.rs"), "use crate::process::run;\n").unwrap();
        std::fs::write(src.join("objects.rs"), "").unwrap();
        std::fs::write(src.join("process.rs"), "use crate::mpi::x;\n").unwrap();
        std::fs::write(
            src.join("slurm/jobs.rs"),
            "use crate::{process::build, mpi::launch};\nfn f() { crate::objects::scenarios::g() }\n",
        )
        .unwrap();
        assert_eq!(
            check(root.path()).unwrap(),
            [
                "xtask/src/slurm/jobs.rs: task `slurm` imports task `mpi` (move what both need \
                 into a shared module)",
                "xtask/src/slurm/jobs.rs: task `slurm` imports task `objects` (move what both \
                 need into a shared module)",
            ]
        );
    }
}
