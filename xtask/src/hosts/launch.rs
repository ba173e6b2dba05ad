//! How a job reaches the hosts: Open MPI's remote-shell launcher pointed at a script that does
//! what `ssh HOST COMMAND` does on real hosts (runs COMMAND on HOST: in its namespace, under its
//! own host name and temporary directory), a hostfile of the hosts' addresses, and the `mpirun`
//! command line over TCP between them. Shared by every scenario, so a module of its own.

use std::fs::{File, TryLockError};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

use super::net::{BRIDGE_ADDR, Network, SUBNET};
use crate::process::is_root;

/// The name every line the task prints starts with.
pub(super) const TASK: &str = "hosts";

/// Open MPI's TCP keepalive for its own control connections (`mpirun` to each host's `orted`),
/// what makes a job end when a host's link goes down: `mpirun` and each `orted` find the other
/// gone after `time + intvl × probes` seconds of silence (about 3 s), before the cut
/// scenario's collective timeout (5 s) makes a rank abort, so the lost host is noticed while
/// the connection is still idle. Open MPI 4.1's
/// defaults (300 s, 20 s, 9 probes) leave 8 minutes; once a rank has aborted first, data is
/// in flight on the connection, keepalive no longer applies, and TCP retries for 15 minutes.
/// Set in `mpirun`'s environment, as an administrator would in `openmpi-mca-params.conf`.
pub(super) const KEEPALIVE: &[(&str, &str)] = &[
    ("OMPI_MCA_oob_tcp_keepalive_time", "1"),
    ("OMPI_MCA_oob_tcp_keepalive_intvl", "1"),
    ("OMPI_MCA_oob_tcp_keepalive_probes", "2"),
];

/// The S3 client settings every rank gets from `mpirun` (`-x`), as `server::s3_env` sets them.
const S3_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
];

/// The launcher's files and the S3 endpoint on the bridge.
pub(super) struct Cluster {
    agent: PathBuf,
    hostfile: PathBuf,
    pub(super) endpoint: String,
    /// Each host's own `TMPDIR` (where its writers stage what they ship), by host.
    pub(super) tmp: Vec<PathBuf>,
    /// The hosts' addresses, by host.
    pub(super) addrs: Vec<String>,
    /// The hosts' namespaces, by host.
    pub(super) namespaces: Vec<String>,
}

impl Cluster {
    /// Writes the agent script and the hostfile into `work`, for the hosts of `network` and the
    /// S3 server at `endpoint`.
    pub(super) fn new(work: &Path, network: &Network, endpoint: &str) -> anyhow::Result<Self> {
        let mut cases = String::new();
        let mut hostfile = String::new();
        let mut tmp = Vec::new();
        for host in &network.hosts {
            let dir = work.join(&host.name).join("tmp");
            std::fs::create_dir_all(&dir)?;
            cases.push_str(&format!(
                "  {}) ns={} name={} tmp='{}' ;;\n",
                host.addr,
                host.ns,
                host.name,
                dir.display()
            ));
            hostfile.push_str(&format!("{} slots=1\n", host.addr));
            tmp.push(dir);
        }
        let agent = work.join("agent");
        std::fs::write(&agent, agent_script(&cases))?;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))?;
        let hosts = work.join("hostfile");
        std::fs::write(&hosts, hostfile)?;
        Ok(Cluster {
            agent,
            hostfile: hosts,
            endpoint: endpoint.to_owned(),
            tmp,
            addrs: network.hosts.iter().map(|h| h.addr.clone()).collect(),
            namespaces: network.hosts.iter().map(|h| h.ns.clone()).collect(),
        })
    }

    /// `mpirun` of one rank per host over TCP between the hosts, with the S3 client settings.
    pub(super) fn mpirun(&self) -> Command {
        let mut command = Command::new("mpirun");
        command
            .arg("--hostfile")
            .arg(&self.hostfile)
            .args(["-n", &self.addrs.len().to_string(), "--map-by", "node"])
            .arg("--mca")
            .arg("plm_rsh_agent")
            .arg(&self.agent);
        for (name, value) in [
            ("pml", "ob1"),
            ("btl", "tcp,self"),
            ("btl_tcp_if_include", SUBNET),
            ("oob_tcp_if_include", SUBNET),
        ] {
            command.args(["--mca", name, value]);
        }
        for var in S3_VARS {
            command.args(["-x", var]);
        }
        if is_root() {
            command.arg("--allow-run-as-root");
        }
        command.envs(KEEPALIVE.iter().copied());
        self.s3(&mut command);
        command
    }

    /// `command` inside host `host`'s namespace, with its `TMPDIR` and the S3 settings.
    pub(super) fn on_host(&self, host: usize, program: &Path) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespaces[host]])
            .arg(program)
            .env("TMPDIR", &self.tmp[host]);
        self.s3(&mut command);
        command
    }

    /// Sets the S3 client settings on `command`.
    pub(super) fn s3(&self, command: &mut Command) {
        crate::server::s3_env(command, &self.endpoint);
    }

    /// The path of the agent script: on the command line of every `mpirun` of the task, which
    /// is how an earlier run's leftovers are found.
    pub(super) fn agent(&self) -> &Path {
        &self.agent
    }
}

/// The remote shell: `agent [ssh options] HOST COMMAND...`, with one `case` line per host.
fn agent_script(cases: &str) -> String {
    format!(
        "#!/bin/sh\n\
         # Open MPI's remote shell for cargo xtask hosts, in place of ssh: runs COMMAND in HOST's\n\
         # network namespace, under HOST's own host name and TMPDIR.\n\
         while [ $# -gt 0 ]; do case \"$1\" in -*) shift ;; *) break ;; esac; done\n\
         host=\"$1\"; shift\n\
         case \"$host\" in\n{cases}  *) echo \"agent: no host $host\" >&2; exit 255 ;;\n\
         esac\n\
         exec env TMPDIR=\"$tmp\" ip netns exec \"$ns\" unshare --uts sh -c \
         'hostname \"$0\" && exec sh -c \"$1\"' \"$name\" \"$*\"\n"
    )
}

/// The lock that gives one run of the task the machine's share of it (the namespaces' names,
/// the subnet, the bridge): root's, beside the machine's other locks, whatever the target
/// directory.
const MACHINE_LOCK: &str = "/run/lock/ember-xtask-hosts.lock";

/// How long a run waits for another run of the task on this machine (one takes about a minute).
const MACHINE_WAIT: Duration = Duration::from_secs(300);

/// Takes the machine's lock for this run (held until the returned file is dropped), waiting
/// (bounded) for another run of the task (from another checkout, maybe another target
/// directory) to end, so that this one does not remove that one's network as leftovers.
pub(super) fn hold_machine() -> anyhow::Result<File> {
    let path = Path::new(MACHINE_LOCK);
    let path = if path.parent().is_some_and(Path::is_dir) {
        path.to_path_buf()
    } else {
        std::env::temp_dir().join("ember-xtask-hosts.lock")
    };
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let started = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) => {
                ensure!(
                    started.elapsed() < MACHINE_WAIT,
                    "another `cargo xtask hosts` on this machine has held {} for {MACHINE_WAIT:?}",
                    path.display()
                );
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
    }
}

/// Kills what an earlier run of the task that was itself killed left in the root namespace:
/// an `mpirun` of its agent (`agent` on its command line) and its S3 server (listening on the
/// bridge's address). The namespaces' processes go with the namespaces.
pub(super) fn kill_leftovers(agent: &Path) -> anyhow::Result<()> {
    let agent = agent.to_string_lossy().into_owned();
    let moto = format!("moto.server\0-H\0{BRIDGE_ADDR}\0");
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc")
        .context("reading /proc")?
        .flatten()
    {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline);
        if pid != me && (cmdline.contains(&agent) || cmdline.contains(&moto)) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::agent_script;

    #[test]
    fn the_agent_passes_over_option_flags_and_refuses_a_host_it_does_not_know() {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("agent");
        let cases = "  10.0.0.1) ns=none name=h0 tmp=/tmp ;;\n";
        std::fs::write(&agent, agent_script(cases)).unwrap();
        let out = Command::new("sh")
            .arg(&agent)
            .args(["-x", "-T", "10.0.0.2", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(255));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim(),
            "agent: no host 10.0.0.2"
        );
    }
}
