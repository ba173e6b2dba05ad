//! The hosts' network: one Linux network namespace per host, each joined by a veth pair to a
//! bridge in the root namespace that holds the only other address of the subnet. The
//! namespaces get no default route and the root namespace forwards nothing, so no packet of
//! theirs leaves the machine. [`Network`] removes all of it when dropped, and [`Network::up`]
//! first removes what an earlier, killed run left.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

/// The subnet the task's links use: private, and checked unused before anything is made.
pub(super) const SUBNET: &str = "10.203.7.0/24";

/// The bridge's address, in the root namespace: the S3 server's and `mpirun`'s side.
pub(super) const BRIDGE_ADDR: &str = "10.203.7.1";

/// The bridge in the root namespace (interface names hold at most 15 bytes).
const BRIDGE: &str = "emhost-br";

/// How many hosts the task makes.
pub(super) const HOSTS: usize = 2;

/// One host: its namespace, its name, its address, and the root namespace's end of its link.
pub(super) struct Host {
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) addr: String,
    /// The root namespace's end of the host's veth pair, on the bridge: the cable to cut or
    /// to slow down.
    pub(super) veth: String,
}

impl Host {
    fn nth(at: usize) -> Self {
        Host {
            ns: format!("ember-hosts-h{at}"),
            name: format!("h{at}"),
            addr: format!("10.203.7.{}", 10 + at),
            veth: format!("emhost-h{at}"),
        }
    }
}

/// The namespaces, links and bridge of the run, and every process inside the namespaces:
/// all removed when dropped, also when a scenario fails or panics.
pub(super) struct Network {
    pub(super) hosts: Vec<Host>,
}

impl Network {
    /// Removes what an earlier run left, checks that the subnet is free, and makes the hosts.
    pub(super) fn up() -> anyhow::Result<Self> {
        let network = Network {
            hosts: (0..HOSTS).map(Host::nth).collect(),
        };
        network.remove();
        let taken = output(Command::new("ip").args(["-4", "-o", "addr", "show"]))?;
        let routes = output(Command::new("ip").args(["-4", "route", "show", "root", SUBNET]))?;
        ensure!(
            !taken.contains("10.203.7.") && routes.trim().is_empty(),
            "the subnet {SUBNET} is in use on this machine; the task needs it to itself:\n{taken}{routes}"
        );
        ip(&["link", "add", BRIDGE, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{BRIDGE_ADDR}/24"), "dev", BRIDGE])?;
        ip(&["link", "set", BRIDGE, "up"])?;
        for host in &network.hosts {
            let ns = host.ns.as_str();
            ip(&["netns", "add", ns])?;
            ip(&[
                "link", "add", &host.veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ])?;
            ip(&["link", "set", &host.veth, "master", BRIDGE, "up"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", host.addr),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        for host in &network.hosts {
            let routes = output(Command::new("ip").args(["-n", &host.ns, "route", "show"]))?;
            ensure!(
                routes.lines().all(|r| r.starts_with(&format!("{SUBNET} "))),
                "{} has a route off its link: {routes}",
                host.name
            );
        }
        network.reachable()?;
        Ok(network)
    }

    /// Why this machine cannot make a network namespace (a container without the rights, say),
    /// or `None` when it can: a namespace made and removed at once.
    pub(super) fn cannot() -> Option<String> {
        let probe = "ember-hosts-probe";
        let out = Command::new("ip").args(["netns", "add", probe]).output();
        let _ = quiet(Command::new("ip").args(["netns", "del", probe]));
        match out {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(format!(
                "cannot make a network namespace: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => Some(format!("cannot run ip: {e}")),
        }
    }

    /// Waits (bounded) until each host reaches the bridge's address: a bridge port takes a
    /// moment to forward after it comes up.
    pub(super) fn reachable(&self) -> anyhow::Result<()> {
        for host in &self.hosts {
            let started = Instant::now();
            loop {
                // bash's /dev/tcp, to a port nothing listens on: "refused" is an answer.
                let probe = Command::new("ip")
                    .args(["netns", "exec", &host.ns, "timeout", "2", "bash", "-c"])
                    .arg(format!("exec 3<>/dev/tcp/{BRIDGE_ADDR}/9"))
                    .stdout(Stdio::null())
                    .output()
                    .context("starting ip netns exec")?;
                let said = String::from_utf8_lossy(&probe.stderr);
                if probe.status.success() || said.contains("refused") {
                    break;
                }
                ensure!(
                    started.elapsed() < Duration::from_secs(20),
                    "{} does not reach {BRIDGE_ADDR} over its link: {said}",
                    host.name
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Ok(())
    }

    /// Takes `host`'s cable out (`up: false`) or puts it back.
    pub(super) fn link(&self, host: usize, up: bool) -> anyhow::Result<()> {
        let state = if up { "up" } else { "down" };
        ip(&["link", "set", &self.hosts[host].veth, state])
    }

    /// Limits every host's link to `rate` (tc's words) of `bits` per second (tc's token bucket
    /// on the bridge's side, so both directions between two hosts cross one limit), or lifts
    /// the limit (`None`).
    pub(super) fn shape(&self, rate: Option<(&str, f64)>) -> anyhow::Result<()> {
        for host in &self.hosts {
            let _ = quiet(Command::new("tc").args(["qdisc", "del", "dev", &host.veth, "root"]));
            if let Some((rate, bits)) = rate {
                // A bucket of 1 ms at the rate (16 KiB at least, a few packets): a larger one
                // lets the smaller gradients through at veth's own speed. The queue holds 50 ms.
                let burst = format!("{}b", ((bits / 8.0 / 1000.0) as u64).max(16 * 1024));
                let done = quiet(Command::new("tc").args([
                    "qdisc", "add", "dev", &host.veth, "root", "tbf", "rate", rate, "burst",
                    &burst, "latency", "50ms",
                ]))?;
                ensure!(done, "tc could not limit {} to {rate}", host.veth);
            }
        }
        Ok(())
    }

    /// The processes inside `host`'s namespace.
    pub(super) fn pids(&self, host: usize) -> Vec<u32> {
        output(Command::new("ip").args(["netns", "pids", &self.hosts[host].ns]))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .collect()
    }

    /// Kills every process in the namespaces, then removes namespaces, links and bridge;
    /// what is not there is passed over.
    fn remove(&self) {
        for host in &self.hosts {
            let in_ns = output(Command::new("ip").args(["netns", "pids", &host.ns]));
            for pid in in_ns.unwrap_or_default().split_whitespace() {
                let _ = quiet(Command::new("kill").args(["-KILL", pid]));
            }
        }
        for host in &self.hosts {
            let _ = quiet(Command::new("ip").args(["link", "del", &host.veth]));
            let _ = quiet(Command::new("ip").args(["netns", "del", &host.ns]));
        }
        let _ = quiet(Command::new("ip").args(["link", "del", BRIDGE]));
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `ip` with `args`, which must succeed.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("starting ip")?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Whether `command` succeeded, its output discarded.
fn quiet(command: &mut Command) -> anyhow::Result<bool> {
    Ok(command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?
        .success())
}

fn output(command: &mut Command) -> anyhow::Result<String> {
    let out = command.output().context("starting ip")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
