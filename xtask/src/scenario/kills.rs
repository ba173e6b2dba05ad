//! Runs killed with SIGKILL at seeded moments and resumed: the walk of every resume scenario.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};

use crate::process::{Ran, expect_success, run_limited};
use crate::runs::{XorShift, start_and_time};
use crate::scenario::expected::Layout;
use crate::scenario::{Env, Expected};

/// How a run of a program begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Begin {
    Fresh,
    /// From its newest whole checkpoint: refused, changing nothing, when it has none.
    Resume,
    /// From its first step, what it wrote discarded.
    Restart,
}

/// A program a scenario trains, kills and resumes.
pub(crate) enum Program {
    /// `ember train ARGS --logdir PLACE`.
    Cli(Vec<String>),
    /// The `resumable` example (`crates/ember/examples/resumable.rs`) in `mode` (`trainer`,
    /// `burn-train`): a library user's two ways to train.
    Library {
        example: PathBuf,
        mode: &'static str,
    },
}

impl Program {
    /// `ember train` with `args` (without `train` and `--logdir`).
    pub(crate) fn cli(args: &[&str]) -> Self {
        Self::Cli(args.iter().map(|&arg| arg.to_owned()).collect())
    }

    /// The program in messages.
    pub(crate) fn name(&self) -> String {
        match self {
            Self::Cli(args) => format!("ember train {}", args.join(" ")),
            Self::Library { mode, .. } => format!("the resumable example ({mode})"),
        }
    }

    fn layout(&self) -> Layout {
        match self {
            Self::Cli(_) => Layout::Cli,
            Self::Library { .. } => Layout::Library,
        }
    }

    /// The command that begins the run at `place` of `env` as `begin` says.
    fn command(&self, env: &dyn Env, place: &str, begin: Begin) -> Command {
        match self {
            Self::Cli(args) => {
                let mut train = vec!["train"];
                match begin {
                    Begin::Fresh => {
                        train.extend(args.iter().map(String::as_str));
                        train.extend(["--logdir", place]);
                    }
                    Begin::Resume => train.extend(["--resume", place]),
                    Begin::Restart => train.extend(["--restart", place]),
                }
                env.launch(&train)
            }
            Self::Library { example, mode } => {
                let mut command = Command::new(example);
                command.arg(mode).arg(place).current_dir(env.work());
                match begin {
                    Begin::Fresh => {}
                    Begin::Resume => {
                        command.arg("--resume");
                    }
                    Begin::Restart => {
                        command.arg("--restart");
                    }
                }
                command
            }
        }
    }

    /// Where ember's checkpoint files of the run in `dir` are.
    fn checkpoints(&self, dir: &Path) -> PathBuf {
        match self {
            Self::Library {
                mode: "burn-train", ..
            } => dir.join("burn").join("checkpoint"),
            _ => dir.join("checkpoints"),
        }
    }
}

/// A scenario: `program` trained without a break into `<prefix>reference`, then `kills` times
/// into `<prefix>NN`, each killed with SIGKILL at a moment drawn from `seed` over the
/// reference's duration and resumed; each must end as `expected` (or, where `None`, as the
/// reference).
pub(crate) struct KillAndResume<'a> {
    pub(crate) program: Program,
    pub(crate) prefix: &'a str,
    pub(crate) kills: usize,
    pub(crate) seed: u64,
    /// The run every run must equal, the reference included; `None`: the reference.
    pub(crate) expected: Option<&'a Expected>,
}

/// What became of a killed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterKill {
    /// Resumed from its newest checkpoint.
    Resumed,
    /// Killed before its first checkpoint: refused by `--resume`, changing nothing, and
    /// trained again by `--restart`.
    Restarted,
    /// Killed after its last checkpoint, while it closed: refused by `--resume` as finished,
    /// and trained again by `--restart`.
    FinishedThenRestarted,
    /// It ended before the kill (a loaded machine runs faster than the run the kill moments
    /// were spread over): whole as it is.
    EndedFirst,
}

/// The runs a walk left: the reference first; what became of each killed run; what the kills
/// hit, where the runs' files can be read as they are.
pub(crate) struct Walked {
    pub(crate) places: Vec<String>,
    pub(crate) after: Vec<AfterKill>,
    pub(crate) hits: Hits,
}

impl std::fmt::Display for Walked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = |way| self.after.iter().filter(|&&run| run == way).count();
        write!(
            f,
            "{} resumed, {} killed before their first checkpoint and {} after their last, \
             refused and restarted, {} ended before their kill",
            count(AfterKill::Resumed),
            count(AfterKill::Restarted),
            count(AfterKill::FinishedThenRestarted),
            count(AfterKill::EndedFirst)
        )?;
        if self.hits.killed > 0 {
            write!(f, "; {}", self.hits)?;
        }
        Ok(())
    }
}

/// The share of the shortest run's duration so far that kill moments are drawn from. Of the
/// runs, a fifth may still end before their kill (the machine sped up since).
const KILL_SPAN: f64 = 0.85;

impl KillAndResume<'_> {
    /// Walks the scenario in `env`: each run ends as the expected run, or the walk fails
    /// saying where and how.
    pub(crate) fn walk(&self, env: &dyn Env) -> anyhow::Result<Walked> {
        let name = self.program.name();
        let reference = env.place(&format!("{}reference", self.prefix));
        let ran = run_limited(
            self.program.command(env, &reference, Begin::Fresh),
            &name,
            &env.log(&reference, "train"),
        )?;
        expect_success(&ran, &format!("the reference run of {name}"))?;
        let layout = self.program.layout();
        let own;
        let expected = match self.expected {
            Some(expected) => {
                expected.check(env, &reference)?;
                expected
            }
            None => {
                own = Expected::of_layout(env, &reference, layout)?;
                &own
            }
        };
        let mut walked = Walked {
            places: vec![reference],
            after: Vec::new(),
            hits: Hits::default(),
        };
        let mut rng = XorShift(self.seed.max(1));
        // The shortest run seen so far: a reference timed on a busy machine may take longer
        // than its repeats, which would then end before a kill late in its span.
        let mut span = ran.elapsed;
        for kill in 0..self.kills {
            let place = env.place(&format!("{}{kill:02}", self.prefix));
            let at = span.mul_f64(KILL_SPAN * rng.unit());
            let fresh = self.program.command(env, &place, Begin::Fresh);
            let log = env.log(&place, "killed");
            let after = match start_and_time(fresh, &log, at)? {
                Some(took) => {
                    span = span.min(took);
                    AfterKill::EndedFirst
                }
                None => {
                    // Known only where the run's files can be read as they are.
                    let checkpointed = match env.dir(&place) {
                        Some(dir) => Some(
                            walked
                                .hits
                                .count(&self.program.checkpoints(&dir), &layout.log_in(&dir))?,
                        ),
                        None => None,
                    };
                    let (ran, after) = self.resume_or_restart(env, &place, checkpointed)?;
                    expect_success(&ran, &format!("resuming {place} (killed after {at:?})"))?;
                    after
                }
            };
            expected.check(env, &place)?;
            walked.after.push(after);
            walked.places.push(place);
        }
        let ended_first = walked
            .after
            .iter()
            .filter(|&&after| after == AfterKill::EndedFirst)
            .count();
        ensure!(
            ended_first <= self.kills / 5,
            "{ended_first} of {} runs of {name} ended before their kill",
            self.kills
        );
        Ok(walked)
    }

    /// Resumes the killed run at `place`; where no whole checkpoint was left (`checkpointed`
    /// not `Some(true)`, or burn-train's own torn), the refused resume must leave the run's
    /// files as they were, in a directory or a bucket, and the run is restarted.
    fn resume_or_restart(
        &self,
        env: &dyn Env,
        place: &str,
        checkpointed: Option<bool>,
    ) -> anyhow::Result<(Ran, AfterKill)> {
        let name = self.program.name();
        // What a reader of the run finds: the directory, or what `ember pull` brings back of
        // the bucket (its lease aside).
        let before = files_of(&env.on_disk(place)?)?;
        let resumed = run_limited(
            self.program.command(env, place, Begin::Resume),
            &format!("resuming {name}"),
            &env.log(place, "resume"),
        )?;
        if resumed.success {
            return Ok((resumed, AfterKill::Resumed));
        }
        // Killed before `ember train` wrote its command line (a first run on a cold machine
        // may take that long), the run cannot say how it was started: `--restart` takes the
        // arguments.
        let command_lost = resumed
            .output
            .contains("is not a run `ember train` can resume");
        // Killed after its last checkpoint, while it closed: finished, which a resume refuses.
        let finished = resumed.output.contains("has finished");
        let no_checkpoint = resumed.output.contains("no checkpoint to resume from");
        ensure!(
            command_lost || finished || no_checkpoint,
            "{place}: --resume failed:\n{}",
            resumed.output
        );
        // burn-train's own checkpoints may be torn where ember's snapshots are whole.
        let burn_train = matches!(
            self.program,
            Program::Library {
                mode: "burn-train",
                ..
            }
        );
        ensure!(
            finished || checkpointed != Some(true) || burn_train,
            "{place}: --resume found no checkpoint where a whole one was left:\n{}",
            resumed.output
        );
        ensure!(
            files_of(&env.on_disk(place)?)? == before,
            "{place}: the refused resume changed the run's files"
        );
        let mut restart = self.program.command(env, place, Begin::Restart);
        if let (true, Program::Cli(args)) = (command_lost, &self.program) {
            restart.args(args);
        }
        let ran = run_limited(
            restart,
            &format!("restarting {name}"),
            &env.log(place, "restart"),
        )?;
        let after = match finished {
            true => AfterKill::FinishedThenRestarted,
            false => AfterKill::Restarted,
        };
        Ok((ran, after))
    }
}

/// How many checkpoints the Trainer writes at once (its checkpoint threads).
const CHECKPOINTS_AT_ONCE: usize = 2;

/// What the kills hit, from what they left on the disk.
#[derive(Debug, Default)]
pub(crate) struct Hits {
    killed: usize,
    before_first_checkpoint: usize,
    pub(crate) during_checkpoint: usize,
    torn_summary_tail: usize,
}

impl Hits {
    /// Counts what a kill left in the run's checkpoint and log directories; returns whether a
    /// whole checkpoint was left.
    fn count(&mut self, checkpoints: &Path, log: &Path) -> anyhow::Result<bool> {
        self.killed += 1;
        let mut whole = 0;
        let mut temporary = 0;
        for name in crate::runs::file_names(checkpoints) {
            let path = checkpoints.join(&name);
            if name.ends_with(".tmp") {
                temporary += 1;
            } else if name.ends_with(".ember") && path.is_file() {
                let bytes = std::fs::read(&path)?;
                ensure!(
                    whole_checkpoint(&bytes),
                    "{} is torn after a kill: a checkpoint must be whole once it has its name",
                    path.display()
                );
                whole += 1;
            }
        }
        if whole == 0 {
            // Killed while the run's first checkpoints were written: each of the checkpoints
            // the Trainer writes at once may have left its temporary file, nothing more.
            ensure!(
                temporary <= CHECKPOINTS_AT_ONCE,
                "{} holds only torn checkpoints",
                checkpoints.display()
            );
            self.before_first_checkpoint += 1;
        }
        if temporary > 0 {
            self.during_checkpoint += 1;
        }
        if summary_tail_torn(log)? {
            self.torn_summary_tail += 1;
        }
        Ok(whole > 0)
    }
}

impl std::fmt::Display for Hits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "of {} kills, {} came before the first checkpoint, {} during a checkpoint write, {} \
             left a torn summary record",
            self.killed,
            self.before_first_checkpoint,
            self.during_checkpoint,
            self.torn_summary_tail
        )
    }
}

/// Whether `bytes` is a whole checkpoint: its last 4 bytes are the CRC-32C of the rest.
fn whole_checkpoint(bytes: &[u8]) -> bool {
    let Some(body) = bytes.len().checked_sub(4) else {
        return false;
    };
    let stored = u32::from_le_bytes([
        bytes[body],
        bytes[body + 1],
        bytes[body + 2],
        bytes[body + 3],
    ]);
    bytes.starts_with(b"EMBERCKP") && crc32c::crc32c(&bytes[..body]) == stored
}

/// Whether an event file of the run ends in a part of a record (the kill came while the
/// writer pool was writing): each record is a u64 length, its CRC, the data and the data's CRC.
fn summary_tail_torn(log: &Path) -> anyhow::Result<bool> {
    for name in crate::runs::file_names(log) {
        let path = log.join(&name);
        if !(name.contains("tfevents") || name.contains(".summary.")) || !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path)?;
        let mut at = 0usize;
        while at < bytes.len() {
            if bytes.len() - at < 12 {
                return Ok(true);
            }
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into()?) as usize;
            let end = at.saturating_add(12).saturating_add(len).saturating_add(4);
            if end > bytes.len() {
                return Ok(true);
            }
            at = end;
        }
    }
    Ok(false)
}

/// Every file under `dir` with its bytes, the lock files aside (they hold the pid of their
/// last holder, which a library program rewrites when it opens its record).
fn files_of(dir: &Path) -> anyhow::Result<BTreeMap<PathBuf, Vec<u8>>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let entries = match std::fs::read_dir(&at) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("listing {}", at.display())),
        };
        for entry in entries {
            let path = entry?.path();
            let locks = path
                .parent()
                .is_some_and(|parent| parent.ends_with(".ember-locks"));
            if path.is_dir() {
                pending.push(path);
            } else if !locks {
                let bytes =
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                files.insert(path, bytes);
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Local, Store};

    #[test]
    fn a_checkpoint_is_whole_only_with_its_magic_and_its_crc() {
        let mut bytes = b"EMBERCKP body".to_vec();
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        assert!(whole_checkpoint(&bytes));
        let mut flipped = bytes.clone();
        flipped[9] ^= 1;
        assert!(!whole_checkpoint(&flipped));
        assert!(!whole_checkpoint(&bytes[..bytes.len() - 1]));
        assert!(!whole_checkpoint(b"abc"));
    }

    #[test]
    fn an_event_file_ending_in_part_of_a_record_is_torn() {
        let dir = tempfile::tempdir().unwrap();
        // One record: length 3, its CRC, 3 bytes of data, the data's CRC (values unchecked).
        let mut record = 3u64.to_le_bytes().to_vec();
        record.extend_from_slice(&[0; 4]);
        record.extend_from_slice(b"abc");
        record.extend_from_slice(&[0; 4]);
        let file = dir.path().join("events.out.tfevents.1.host");
        std::fs::write(&file, [record.clone(), record.clone()].concat()).unwrap();
        assert!(!summary_tail_torn(dir.path()).unwrap());
        std::fs::write(&file, [record.clone(), record[..9].to_vec()].concat()).unwrap();
        assert!(summary_tail_torn(dir.path()).unwrap());
        assert!(!summary_tail_torn(&dir.path().join("absent")).unwrap());
    }

    #[test]
    fn a_store_names_its_runs_by_url_and_gives_ember_its_environment() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new("gs", Path::new("/bin/ember"), dir.path(), |command| {
            command.env("GOOGLE_SERVICE_ACCOUNT_KEY", "{}");
        })
        .unwrap();
        assert_eq!(store.place("r-00"), "gs://ember/r-00");
        assert!(store.dir("gs://ember/r-00").is_none());
        let command = store.ember(&["inspect"]);
        let env: Vec<_> = command.get_envs().collect();
        assert!(env.contains(&(
            std::ffi::OsStr::new("GOOGLE_SERVICE_ACCOUNT_KEY"),
            Some(std::ffi::OsStr::new("{}"))
        )));
        assert_eq!(
            store.log("gs://ember/r-00", "resume"),
            dir.path().join("gs-r-00.resume.log")
        );
        let local = Local {
            launcher: vec!["mpirun".into(), "-n".into(), "2".into()],
            ..Local::new(Path::new("/bin/ember"), dir.path())
        };
        let launched = local.launch(&["train"]);
        assert_eq!(launched.get_program(), "mpirun");
        let args: Vec<_> = launched.get_args().collect();
        assert_eq!(args, ["-n", "2", "/bin/ember", "train"]);
    }
}
