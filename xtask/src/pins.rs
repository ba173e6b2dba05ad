//! The Python packages the tasks install, each list pinned so that a pass means the same thing
//! on every machine: one module, so that every task (and `cargo xtask docs`, which checks each
//! `pip install` line of the docs against them) takes them from here.

/// The checker's packages, pinned so that a pass means the same thing on every machine.
/// `tensorboard` 2.21.0 is the newest release PyPI offers here (its loaders are what is under
/// test); the others are what it resolved to with Python 3.11, pinned so that a new release of
/// a dependency cannot change the result between runs: `protobuf` parses the events, `numpy`
/// backs `tensor_util`, `pillow` decodes the PNGs.
pub(crate) const COMPAT_REQUIREMENTS: &[&str] = &[
    "tensorboard==2.21.0",
    "protobuf==7.36.2",
    "numpy==2.4.6",
    "pillow==12.0.0",
];

/// MindInsight's checker packages, pinned as resolved with Python 3.11 and tested.
/// `mindinsight` 2.3.1 is the last release; it calls `np.PINF` and `np.NINF`, which numpy 2
/// removed (every tensor value then fails to load), hence `numpy` 1.26. `protobuf` 3.20.1 is
/// the newest it accepts; `pandas` and `pillow` are what it resolved to. (Its web server
/// needs older ones: [`MINDINSIGHT_WEB_REQUIREMENTS`].)
pub(crate) const MINDINSIGHT_REQUIREMENTS: &[&str] = &[
    "mindinsight==2.3.1",
    "numpy==1.26.4",
    "protobuf==3.20.1",
    "pandas==3.0.6",
    "pillow==13.0.0",
];

/// Playwright's Python package, pinned so that a pass means the same on every machine;
/// `greenlet` is what its synchronous API runs on, as resolved with Python 3.11. The package
/// carries its own driver; it is pointed at the system Chromium with `executable_path`.
pub(crate) const BROWSER_REQUIREMENTS: &[&str] = &["playwright==1.65.2", "greenlet==3.5.6"];

/// MLflow's tracking server and Python client (`cargo xtask mlflow`).
pub(crate) const MLFLOW_REQUIREMENTS: &[&str] = &["mlflow[auth]==3.17.2"];

/// MindInsight for its web server: [`MINDINSIGHT_REQUIREMENTS`] with two packages older
/// than pip picks, which its loaders do not need. Its lineage search validators take
/// marshmallow 3's arguments (with 4 every lineage page gets a 500), and its lineage page's
/// optimizer panel calls `DataFrame.iteritems`, which pandas 2 removed. A venv of its own, so
/// that the loaders stay checked with what pip resolves for them.
pub(crate) const MINDINSIGHT_WEB_REQUIREMENTS: &[&str] = &[
    "mindinsight==2.3.1",
    "numpy==1.26.4",
    "protobuf==3.20.1",
    "pandas==1.5.3",
    "marshmallow==3.26.2",
    "pillow==13.0.0",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_pinned() {
        let lists = [
            COMPAT_REQUIREMENTS,
            MINDINSIGHT_REQUIREMENTS,
            BROWSER_REQUIREMENTS,
            MINDINSIGHT_WEB_REQUIREMENTS,
        ];
        for req in lists.concat() {
            let (name, version) = req.split_once("==").expect("pinned with ==");
            assert!(!name.is_empty() && !version.is_empty(), "{req}");
        }
        assert!(
            COMPAT_REQUIREMENTS
                .iter()
                .any(|r| r.starts_with("tensorboard=="))
        );
        // MindInsight 2.3.1 calls np.PINF, which numpy 2 removed.
        assert!(MINDINSIGHT_REQUIREMENTS.contains(&"mindinsight==2.3.1"));
        assert!(MINDINSIGHT_REQUIREMENTS.contains(&"numpy==1.26.4"));
        assert!(BROWSER_REQUIREMENTS.contains(&"playwright==1.65.2"));
        assert!(MINDINSIGHT_WEB_REQUIREMENTS.contains(&"marshmallow==3.26.2"));
    }
}
