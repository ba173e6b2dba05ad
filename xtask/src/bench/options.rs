//! `cargo xtask bench`'s options, which the runs follow and the report states: a module of its
//! own, so that the runs (`bench.rs`) and the report (`report.rs`) share it.

use anyhow::{Context, bail};

#[derive(Debug, Default)]
pub(super) struct Options {
    pub(super) peers: bool,
    pub(super) skip_criterion: bool,
    pub(super) rounds: usize,
}

pub(super) fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut options = Options {
        rounds: 5,
        ..Options::default()
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--peers" => options.peers = true,
            "--skip-criterion" => options.skip_criterion = true,
            "--rounds" => {
                let value = args.next().context("--rounds needs a number")?;
                options.rounds = value
                    .parse()
                    .ok()
                    .filter(|&r| r >= 1)
                    .with_context(|| format!("--rounds {value}: give a whole number >= 1"))?;
            }
            other => bail!(
                "unknown bench option {other:?}; usage: cargo xtask bench [--peers] \
                 [--skip-criterion] [--rounds R]"
            ),
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_reject_unknown_ones() {
        let args = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let o = parse(&args(&["--peers", "--rounds", "3"])).unwrap();
        assert!(o.peers && !o.skip_criterion && o.rounds == 3);
        let o = parse(&args(&["--skip-criterion"])).unwrap();
        assert!(!o.peers && o.skip_criterion && o.rounds == 5);
        assert!(parse(&args(&["--rounds", "0"])).is_err());
        assert!(parse(&args(&["--rounds"])).is_err());
        assert!(parse(&args(&["--fast"])).is_err());
    }
}
