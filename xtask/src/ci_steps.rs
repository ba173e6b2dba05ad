//! The steps CI runs, written once: `cargo xtask ci` runs them, `.ci/run` runs the same lines
//! (a test below keeps them in step), and `cargo xtask docs` lets a doc's `sh` block name one of
//! them rather than run it. A module of its own, so that neither task imports the other.

/// Each step as a command line; `.ci/run` runs the same lines (a test below keeps them in step).
pub(crate) const STEPS: &[&str] = &[
    "cargo fmt --all -- --check",
    "cargo xtask layers",
    "cargo xtask codegen --check",
    "cargo clippy --workspace --all-targets -- -D warnings",
    "cargo clippy -p ember -p ember-cli -p ember-tests --all-targets --features ember/wgpu,ember-cli/wgpu,ember-tests/wgpu -- -D warnings",
    "env DOCS_RS=1 cargo clippy -p ember -p ember-cli -p ember-tests --all-targets --features ember/cuda,ember-cli/cuda,ember-tests/cuda -- -D warnings",
    "cargo xtask features",
    "cargo test --workspace",
    "cargo xtask compat",
    "cargo xtask resume",
    "cargo xtask live",
    "cargo xtask mlflow",
    "cargo xtask scaling --quick",
    "cargo xtask docs",
    "cargo clippy -p ember-write -p ember -p ember-cli --all-targets --features ember-write/object-store,ember/object-store,ember-cli/object-store -- -D warnings",
    "cargo test -p ember-write -p ember --lib --features ember-write/object-store,ember/object-store",
    "cargo xtask objects",
    "cargo xtask mpi",
    "cargo xtask hosts",
    "cargo xtask slurm",
    "cargo xtask devices",
];

#[cfg(test)]
mod tests {
    #[test]
    fn ci_run_runs_every_step_of_cargo_xtask_ci() {
        let script = std::fs::read_to_string(crate::workspace_root().join(".ci/run"))
            .expect(".ci/run is readable");
        for step in super::STEPS {
            assert!(script.contains(step), ".ci/run does not run `{step}`");
        }
    }
}
