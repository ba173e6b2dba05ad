//! `cargo xtask features`: `ember` without its `burn` feature is what a logging-only user gets,
//! and the docs build without warnings with and without it.
//!
//! 1. `cargo tree -p ember --no-default-features -e normal` must name no `burn` crate (and no
//!    `ember-pool`, `ember-step`, `ember-collective` or `mpi`); the crate counts with and without the feature are printed.
//! 2. A scratch crate under `<target>/logging-only` depends on `ember` with
//!    `default-features = false`, exactly as the README shows, and builds and runs
//!    `crates/ember/examples/logging.rs` as its `main`: the example cannot lean on a feature
//!    that the workspace's own dev-dependencies (which build Burn) would switch on.
//! 3. `cargo doc --workspace --no-deps` and `cargo doc -p ember --no-deps --no-default-features`
//!    with `RUSTDOCFLAGS=-D warnings`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail, ensure};

use crate::process::target_dir;

/// The normal-dependency crates of `ember` with the given feature flags, deduplicated.
fn crates(root: &Path, flags: &[&str]) -> anyhow::Result<BTreeSet<String>> {
    let out = Command::new("cargo")
        .args(["tree", "-p", "ember", "-e", "normal", "--prefix", "none"])
        .args(flags)
        .current_dir(root)
        .output()
        .context("running cargo tree")?;
    ensure!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

fn run_checked(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("starting {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let without = crates(root, &["--no-default-features"])?;
    let with = crates(root, &[])?;
    let leaked: Vec<&String> = without
        .iter()
        .filter(|c| {
            c.starts_with("burn")
                || ["ember-pool", "ember-step", "ember-collective", "mpi"].contains(&c.as_str())
        })
        .collect();
    ensure!(
        leaked.is_empty(),
        "ember without its burn feature still depends on {leaked:?}"
    );
    ensure!(
        with.iter().any(|c| c == "burn"),
        "ember with its default features should depend on burn"
    );
    eprintln!(
        "features: ember logging only = {} crates, with burn = {} crates (cargo tree -e normal)",
        without.len(),
        with.len()
    );

    logging_only_crate(root)?;
    for (what, args) in [
        (
            "cargo doc --workspace",
            &["doc", "--workspace", "--no-deps"][..],
        ),
        (
            "cargo doc -p ember --no-default-features",
            &["doc", "-p", "ember", "--no-deps", "--no-default-features"][..],
        ),
    ] {
        run_checked(
            Command::new("cargo")
                .args(args)
                .current_dir(root)
                .env("RUSTDOCFLAGS", "-D warnings"),
            what,
        )?;
    }
    eprintln!("features: logging-only build, its example run and docs of both feature sets pass");
    Ok(())
}

/// The README's dependency line, in a crate of its own: no burn crate in its tree, and
/// `examples/logging.rs` builds and runs there.
fn logging_only_crate(root: &Path) -> anyhow::Result<()> {
    let scratch = target_dir(root).join("logging-only");
    std::fs::create_dir_all(scratch.join("src"))?;
    let manifest = format!(
        "[package]\nname = \"logging-only\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\nember = {{ path = {:?}, default-features = false }}\n\n\
         [profile.dev]\ndebug = \"line-tables-only\"\n\n[profile.dev.package.\"*\"]\ndebug = false\n\n\
         [workspace]\n",
        root.join("crates/ember")
    );
    std::fs::write(scratch.join("Cargo.toml"), manifest)?;
    std::fs::copy(
        root.join("crates/ember/examples/logging.rs"),
        scratch.join("src/main.rs"),
    )?;
    // The workspace's lock file, so the scratch crate builds the versions CI tests (cargo adds
    // the scratch package itself to it).
    std::fs::copy(root.join("Cargo.lock"), scratch.join("Cargo.lock"))?;
    let user_tree = Command::new("cargo")
        .args(["tree", "-e", "normal", "--prefix", "none"])
        .current_dir(&scratch)
        .output()
        .context("running cargo tree in the scratch crate")?;
    ensure!(
        user_tree.status.success(),
        "cargo tree failed in {}: {}",
        scratch.display(),
        String::from_utf8_lossy(&user_tree.stderr)
    );
    let user_crates = String::from_utf8_lossy(&user_tree.stdout);
    ensure!(
        !user_crates.lines().any(|l| l.starts_with("burn")),
        "a logging-only user's tree holds burn crates"
    );
    let logs = scratch.join("runs");
    let _ = std::fs::remove_dir_all(&logs);
    run_checked(
        Command::new("cargo")
            .args(["run", "--quiet", "--"])
            .arg(&logs)
            .current_dir(&scratch)
            // The workspace's target directory: the dependencies it shares are built once.
            .env("CARGO_TARGET_DIR", target_dir(root)),
        "building and running examples/logging.rs without the burn feature",
    )?;
    Ok(())
}
