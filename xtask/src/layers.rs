//! The layering check: each crate under `crates/` depends, among the workspace's own crates,
//! only on crates of the layer directly below it, as `docs/architecture.md`'s layer table says;
//! and inside no crate (xtask and the tests' crate included) do modules import each other in
//! circles (`module_cycles.rs`); the paths docs/architecture.md names exist
//! (`architecture_doc.rs`); and no xtask task imports another (`task_imports.rs`). How long a
//! function may be is clippy's `too_many_lines`, set in the workspace's lints and `clippy.toml`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// A workspace crate under `crates/` and the workspace crates it depends on (dev-dependencies
/// aside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CrateEdges {
    pub(crate) name: String,
    pub(crate) dependencies: Vec<String>,
}

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let violations = check_workspace(root)?;
    if violations.is_empty() {
        eprintln!("layers: every crate depends only on the layer directly below it");
    }
    for violation in &violations {
        eprintln!("layers: {violation}");
    }
    let (cycles, crates) = crate::module_cycles::check_workspace(root)?;
    if cycles.is_empty() {
        eprintln!("layers: no module cycle inside any of the {crates} crates");
    }
    for cycle in &cycles {
        eprintln!("layers: {cycle}");
    }
    // The layer table and the paths live in one doc; a stale path fails here, as CI runs this.
    let doc = crate::architecture_doc::check(root)?;
    if doc.is_empty() {
        eprintln!("layers: every path docs/architecture.md names exists");
    }
    for problem in &doc {
        eprintln!("layers: {problem}");
    }
    let task_imports = crate::task_imports::check(root)?;
    if task_imports.is_empty() {
        eprintln!("layers: no xtask task imports another");
    }
    for problem in &task_imports {
        eprintln!("layers: {problem}");
    }
    if !violations.is_empty() || !cycles.is_empty() || !doc.is_empty() || !task_imports.is_empty() {
        bail!(
            "{} layering violation(s), {} module cycle(s), {} architecture doc problem(s), {} \
             task import(s) of another task",
            violations.len(),
            cycles.len(),
            doc.len(),
            task_imports.len(),
        )
    }
    Ok(())
}

/// Reads the layer table and `cargo metadata`, and returns every violation.
pub(crate) fn check_workspace(root: &Path) -> anyhow::Result<Vec<String>> {
    let doc = std::fs::read_to_string(root.join("docs/architecture.md"))
        .context("reading docs/architecture.md")?;
    let layers = parse_layer_table(&doc);
    if layers.is_empty() {
        bail!("docs/architecture.md has no layer table (rows like `| L0 | `crate` | ... |`)");
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("parsing cargo metadata")?;
    Ok(check(&layers, &crate_edges(&metadata)))
}

/// `| L<n> | `a`, `b` | ... |` rows of a markdown table: crate name to layer number.
pub(crate) fn parse_layer_table(doc: &str) -> BTreeMap<String, u32> {
    let mut layers = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.trim().split('|').map(str::trim).collect();
        // A row reads "", "L<n>", "<crates>", ...
        let [first, layer, crates, ..] = cells.as_slice() else {
            continue;
        };
        let Some(number) = first
            .is_empty()
            .then(|| layer.strip_prefix('L'))
            .flatten()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        for name in crates.split('`').skip(1).step_by(2) {
            layers.insert(name.to_string(), number);
        }
    }
    layers
}

/// The crates under `crates/` and their normal and build dependencies on workspace members.
pub(crate) fn crate_edges(metadata: &serde_json::Value) -> Vec<CrateEdges> {
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let members: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .filter(|p| {
            p["manifest_path"]
                .as_str()
                .is_some_and(|path| path.replace('\\', "/").contains("/crates/"))
        })
        .filter_map(|p| {
            let name = p["name"].as_str()?.to_string();
            let dependencies = p["dependencies"]
                .as_array()
                .map(|deps| {
                    deps.iter()
                        .filter(|d| d["kind"].as_str() != Some("dev"))
                        .filter_map(|d| d["name"].as_str())
                        .filter(|d| members.contains(d))
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            Some(CrateEdges { name, dependencies })
        })
        .collect()
}

/// Every edge that does not go exactly one layer down, and every crate the table misses.
pub(crate) fn check(layers: &BTreeMap<String, u32>, crates: &[CrateEdges]) -> Vec<String> {
    let mut violations = Vec::new();
    for krate in crates {
        let Some(&layer) = layers.get(&krate.name) else {
            violations.push(format!(
                "crate {} is in no layer of docs/architecture.md",
                krate.name
            ));
            continue;
        };
        for dependency in &krate.dependencies {
            match layers.get(dependency) {
                Some(&below) if below + 1 == layer => {}
                Some(&other) => {
                    let allowed = match layer.checked_sub(1) {
                        Some(below) => format!("only L{below} is allowed"),
                        None => "L0 may depend on no workspace crate".to_string(),
                    };
                    violations.push(format!(
                        "{} (L{layer}) depends on {dependency} (L{other}); {allowed}",
                        krate.name
                    ))
                }
                None => violations.push(format!(
                    "{} depends on {dependency}, which is in no layer",
                    krate.name
                )),
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
| layer | crates | job |
|---|---|---|
| L0 | `ember-step`, `ember-pack` | protocol, packing |
| L1 | `ember-pool`, `ember-write` | pool, writers |
| L2 | `ember` | facade |
";

    fn edges(name: &str, dependencies: &[&str]) -> CrateEdges {
        CrateEdges {
            name: name.into(),
            dependencies: dependencies.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn the_table_gives_each_crate_its_layer() {
        let layers = parse_layer_table(TABLE);
        assert_eq!(layers["ember-step"], 0);
        assert_eq!(layers["ember-write"], 1);
        assert_eq!(layers["ember"], 2);
        assert_eq!(layers.len(), 5);
    }

    #[test]
    fn edges_one_layer_down_pass() {
        let layers = parse_layer_table(TABLE);
        let crates = [
            edges("ember-pool", &["ember-step"]),
            edges("ember", &["ember-pool", "ember-write"]),
        ];
        assert_eq!(check(&layers, &crates), Vec::<String>::new());
    }

    #[test]
    fn an_upward_edge_is_caught() {
        let layers = parse_layer_table(TABLE);
        let violations = check(&layers, &[edges("ember-pack", &["ember-write"])]);
        assert_eq!(
            violations,
            ["ember-pack (L0) depends on ember-write (L1); L0 may depend on no workspace crate"]
        );
    }

    #[test]
    fn a_sideways_edge_is_caught() {
        let layers = parse_layer_table(TABLE);
        let violations = check(&layers, &[edges("ember-write", &["ember-pool"])]);
        assert_eq!(
            violations,
            ["ember-write (L1) depends on ember-pool (L1); only L0 is allowed"]
        );
    }

    #[test]
    fn an_edge_skipping_a_layer_is_caught() {
        let layers = parse_layer_table(TABLE);
        let violations = check(&layers, &[edges("ember", &["ember-pack"])]);
        assert_eq!(
            violations,
            ["ember (L2) depends on ember-pack (L0); only L1 is allowed"]
        );
    }

    #[test]
    fn a_crate_missing_from_the_table_is_caught() {
        let layers = parse_layer_table(TABLE);
        let violations = check(&layers, &[edges("ember-extra", &[])]);
        assert_eq!(
            violations,
            ["crate ember-extra is in no layer of docs/architecture.md"]
        );
    }

    #[test]
    fn dev_dependencies_and_outside_crates_do_not_count() {
        let metadata = serde_json::json!({
            "packages": [
                {"name": "ember-pool", "manifest_path": "/w/crates/ember-pool/Cargo.toml",
                 "dependencies": [
                    {"name": "ember-step", "kind": null},
                    {"name": "ember-write", "kind": "dev"},
                    {"name": "crossbeam-channel", "kind": null}]},
                {"name": "ember-step", "manifest_path": "/w/crates/ember-step/Cargo.toml", "dependencies": []},
                {"name": "ember-write", "manifest_path": "/w/crates/ember-write/Cargo.toml", "dependencies": []},
                {"name": "xtask", "manifest_path": "/w/xtask/Cargo.toml",
                 "dependencies": [{"name": "ember-pool", "kind": null}]}
            ]
        });
        let crates = crate_edges(&metadata);
        assert_eq!(crates.len(), 3);
        assert_eq!(crates[0], edges("ember-pool", &["ember-step"]));
    }

    #[test]
    fn this_workspace_is_layered() {
        let root = crate::workspace_root();
        let violations = check_workspace(&root).expect("the check runs");
        assert_eq!(violations, Vec::<String>::new());
    }
}
