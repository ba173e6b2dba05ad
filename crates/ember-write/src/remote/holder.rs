//! Who holds a bucket run's lease, as its object says ([`LeaseHolder`]), and how often it is
//! renewed and when it goes stale ([`LeaseTiming`]): what the lease, the claim it leaves and
//! the errors that name a holder share (see the `lease` module for the rules).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often a lease is renewed, and when one that was not is taken for its holder's death.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How often the holder renews it.
    pub renew_every: Duration,
    /// How long a lease not renewed stays its holder's.
    pub stale_after: Duration,
}

impl LeaseTiming {
    /// How long after a renewal was sent its holder may write: half of
    /// [`stale_after`](Self::stale_after), so that it stops well before another writer may
    /// take the lease over (see the module docs).
    pub fn valid_for(&self) -> Duration {
        self.stale_after / 2
    }
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self {
            renew_every: Duration::from_secs(2),
            stale_after: Duration::from_secs(8),
        }
    }
}

/// Who holds a lease, as its object says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// When it took the lease, in milliseconds since the Unix epoch.
    pub taken_ms: u64,
    /// When it last renewed it, in milliseconds since the Unix epoch.
    pub renewed_ms: u64,
    /// The id of the run it writes, where its writer named one.
    pub run: Option<String>,
}

impl LeaseHolder {
    pub(super) fn this_process(run: Option<&str>) -> Self {
        let now = now_ms();
        Self {
            host: crate::naming::host_name(),
            pid: std::process::id(),
            taken_ms: now,
            renewed_ms: now,
            run: run.map(str::to_owned),
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut text = format!(
            "host={}\npid={}\ntaken={}\nrenewed={}\n",
            self.host, self.pid, self.taken_ms, self.renewed_ms
        );
        if let Some(run) = &self.run {
            text.push_str(&format!("run={run}\n"));
        }
        text.into_bytes()
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let field = |key: &str| {
            text.lines()
                .filter_map(|line| line.split_once('='))
                .find(|(k, _)| *k == key)
                .map(|(_, value)| value)
        };
        Some(Self {
            host: field("host")?.to_owned(),
            pid: field("pid")?.parse().ok()?,
            taken_ms: field("taken")?.parse().ok()?,
            renewed_ms: field("renewed")?.parse().ok()?,
            run: field("run").map(str::to_owned),
        })
    }

    /// How long ago, by this host's clock, the holder last renewed the lease.
    pub fn renewed_ago(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.renewed_ms))
    }

    /// Whether the holder is a process of this host that is alive (`Some(false)`: it is gone),
    /// or lives elsewhere (`None`: only its renewals tell).
    pub(super) fn alive_here(&self) -> Option<bool> {
        if self.host != crate::naming::host_name() {
            return None;
        }
        #[cfg(unix)]
        {
            let pid = i32::try_from(self.pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)?;
            // EPERM: it exists, another user's. A zombie (killed, not yet reaped: a job's
            // rank whose parent died before it) holds nothing either.
            let exists = !matches!(
                rustix::process::test_kill_process(pid),
                Err(rustix::io::Errno::SRCH)
            );
            match process_state(self.pid) {
                _ if !exists => Some(false),
                Some('Z' | 'X') => Some(false),
                // Stopped, it renews nothing until it is continued: its renewals tell.
                Some('T' | 't') => None,
                _ => Some(true),
            }
        }
        #[cfg(not(unix))]
        None
    }
}

/// The state of process `pid` as Linux's `/proc/<pid>/stat` says (`R`, `S`, `T` stopped, `Z`
/// ended and waiting to be reaped, …); `None` where that cannot be read.
pub(super) fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold any byte.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().next()?.chars().next()
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
