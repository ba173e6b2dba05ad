//! The trap of a job across hosts: when a host drops off the network, the ranks that remain
//! give up after `--collective-timeout`, but `mpirun` itself waits for the lost host's daemon
//! until Open MPI's own TCP connections notice, which with its keepalive unset takes TCP's
//! retransmission limit, about 15 minutes, with processes left running meanwhile. Open MPI's
//! `oob_tcp_keepalive_{time,intvl,probes}` set shorter than the collective timeout end it in
//! time + intvl × probes seconds. A rank knows both when it starts, so it says so then.

use std::time::Duration;

/// Open MPI's names of the keepalive parameters, as MCA parameters.
const PARAMETERS: [&str; 3] = [
    "oob_tcp_keepalive_time",
    "oob_tcp_keepalive_intvl",
    "oob_tcp_keepalive_probes",
];

/// The line to print when a job whose ranks run on more than one host (`local_size` ranks on
/// this host of `world_size`) would hang past `timeout` on a lost host, given the MCA
/// parameters `setting` reads (by name, as in `mca-params.conf`); `None` when it would not.
pub(crate) fn lost_host_warning(
    setting: impl Fn(&str) -> Option<String>,
    (local_size, world_size): (usize, usize),
    timeout: Duration,
) -> Option<String> {
    if local_size >= world_size {
        return None;
    }
    let values: Vec<Option<u64>> = PARAMETERS
        .iter()
        .map(|name| setting(name).and_then(|v| v.trim().parse().ok()))
        .collect();
    let fix = format!(
        "set OMPI_MCA_oob_tcp_keepalive_time, _intvl and _probes so that time + intvl x probes \
         is under --collective-timeout ({} s), e.g. time=1 intvl=1 probes=2, in mpirun's \
         environment or $HOME/.openmpi/mca-params.conf",
        timeout.as_secs()
    );
    let (time, intvl, probes) = match values[..] {
        [Some(time), Some(intvl), Some(probes)] => (time, intvl, probes),
        _ => {
            return Some(format!(
                "warning: Open MPI's keepalive is not set: a host lost from the network will \
                 leave mpirun waiting about 15 minutes before the job ends; {fix}"
            ));
        }
    };
    let noticed = time.saturating_add(intvl.saturating_mul(probes));
    (noticed >= timeout.as_secs()).then(|| {
        format!(
            "warning: Open MPI's keepalive notices a lost host after {noticed} s, not before \
             --collective-timeout ({} s) ends the ranks: mpirun will wait that long; {fix}",
            timeout.as_secs()
        )
    })
}

/// An MCA parameter as Open MPI reads it: `OMPI_MCA_<name>` from the environment, else a
/// `name = value` line of `$HOME/.openmpi/mca-params.conf`.
pub(crate) fn mca_setting(name: &str) -> Option<String> {
    if let Ok(value) = std::env::var(format!("OMPI_MCA_{name}")) {
        return Some(value);
    }
    let home = std::env::var_os("HOME")?;
    let conf =
        std::fs::read_to_string(std::path::Path::new(&home).join(".openmpi/mca-params.conf"))
            .ok()?;
    conf_value(&conf, name)
}

/// The value of `name` in the text of an `mca-params.conf` (`#` starts a comment).
fn conf_value(conf: &str, name: &str) -> Option<String> {
    conf.lines()
        .map(|line| line.split('#').next().unwrap_or(""))
        .filter_map(|line| line.split_once('='))
        .find(|(key, _)| key.trim() == name)
        .map(|(_, value)| value.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    const TIMEOUT: Duration = Duration::from_secs(5);

    #[test]
    fn an_unset_keepalive_across_hosts_is_warned_of_with_the_fix() {
        let warning = lost_host_warning(settings(&[]), (1, 2), TIMEOUT).unwrap();
        assert!(warning.starts_with("warning: "), "{warning}");
        assert!(warning.contains("15 minutes"), "{warning}");
        assert!(
            warning.contains("OMPI_MCA_oob_tcp_keepalive_time"),
            "{warning}"
        );
        assert!(warning.contains("(5 s)"), "{warning}");
        // One of three set is not set.
        let partly = settings(&[("oob_tcp_keepalive_time", "1")]);
        assert!(lost_host_warning(partly, (1, 2), TIMEOUT).is_some());
    }

    #[test]
    fn a_keepalive_not_shorter_than_the_timeout_is_warned_of_with_its_figure() {
        // The README's example against a 5 s timeout: 10 + 5 x 3 = 25 s.
        let slow = settings(&[
            ("oob_tcp_keepalive_time", "10"),
            ("oob_tcp_keepalive_intvl", "5"),
            ("oob_tcp_keepalive_probes", "3"),
        ]);
        let warning = lost_host_warning(slow, (1, 2), TIMEOUT).unwrap();
        assert!(warning.contains("after 25 s"), "{warning}");
    }

    #[test]
    fn a_short_keepalive_or_a_job_on_one_host_is_not_warned_of() {
        let short = settings(&[
            ("oob_tcp_keepalive_time", "1"),
            ("oob_tcp_keepalive_intvl", "1"),
            ("oob_tcp_keepalive_probes", "2"),
        ]);
        assert_eq!(lost_host_warning(short, (1, 2), TIMEOUT), None);
        // Every rank on this host: no host to lose.
        assert_eq!(lost_host_warning(settings(&[]), (2, 2), TIMEOUT), None);
    }

    #[test]
    fn the_conf_file_is_read_as_open_mpi_reads_it() {
        let conf =
            "# keepalive\noob_tcp_keepalive_time = 2 # seconds\n\noob_tcp_keepalive_probes=4\n";
        assert_eq!(
            conf_value(conf, "oob_tcp_keepalive_time").as_deref(),
            Some("2")
        );
        assert_eq!(
            conf_value(conf, "oob_tcp_keepalive_probes").as_deref(),
            Some("4")
        );
        assert_eq!(conf_value(conf, "oob_tcp_keepalive_intvl"), None);
    }
}
