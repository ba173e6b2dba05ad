//! What a run is: the id it gets at its first start, and the settings that shape its result.
//! Both go into every checkpoint it takes, so that a checkpoint of another run (copied into
//! its directory, or left there by a run of other settings) is told from its own by reading it.

use std::fmt;

use ember_write::pack::{HParamValue, HParams};

/// A run's id: 128 random bits, made at the run's first start, kept by every start after it
/// (resumed, restarted).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId(String);

impl RunId {
    /// A new id, unlike any other run's.
    pub fn new() -> Self {
        Self(format!("{:016x}{:016x}", random_u64(), random_u64()))
    }

    /// The id written as `text` (32 hexadecimal digits), or `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        (text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(text.to_ascii_lowercase()))
    }

    /// The id as it is written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// 64 bits no other process or call draws alike: the standard library's randomly keyed hasher
/// (its keys come from the operating system), fed the time and the process.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(now);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// The settings that shape a run's result (its hyper-parameters: learning rate, seeds, model and
/// data sizes, batch, …), by name, in the order given. A run goes on only with the same.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings(Vec<(String, HParamValue)>);

impl Settings {
    /// No settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// The hyper-parameters of `hparams` (not its metrics).
    pub fn of(hparams: &HParams) -> Self {
        Self(hparams.hparams.clone())
    }

    /// Each setting as a checkpoint's meta line holds it: `setting=<name, hex> <value>`.
    pub(crate) fn meta_lines(&self) -> impl Iterator<Item = String> + '_ {
        self.0.iter().map(|(name, value)| {
            format!("setting={} {}", hex::encode(name.as_bytes()), encode(value))
        })
    }

    /// The settings a checkpoint's `setting=` meta lines hold; `Err` names a malformed one.
    pub(crate) fn from_meta<'a>(lines: impl Iterator<Item = &'a str>) -> Result<Self, String> {
        lines
            .map(|line| {
                let bad = || format!("`setting={line}`");
                let (name, value) = line.split_once(' ').ok_or_else(bad)?;
                let name = hex::decode(name)
                    .ok()
                    .and_then(|n| String::from_utf8(n).ok());
                Ok((name.ok_or_else(bad)?, decode(value).ok_or_else(bad)?))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Each setting that differs between `self` (a checkpoint's) and `given` (the run
    /// resuming's), as `name: value there, value here`; a setting only one side has differs.
    pub(crate) fn differences(&self, given: &Settings) -> Vec<String> {
        let find = |settings: &Settings, name: &str| {
            settings
                .0
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let mut names: Vec<&str> = self.0.iter().map(|(n, _)| n.as_str()).collect();
        for (name, _) in &given.0 {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
            .into_iter()
            .filter_map(|name| {
                let (there, here) = (find(self, name), find(given, name));
                let same = match (&there, &here) {
                    (Some(a), Some(b)) => encode(a) == encode(b),
                    (None, None) => true,
                    _ => false,
                };
                (!same).then(|| format!("{name}: {} there, {} here", shown(&there), shown(&here)))
            })
            .collect()
    }
}

fn shown(value: &Option<HParamValue>) -> String {
    match value {
        None => "none".into(),
        Some(HParamValue::Bool(b)) => b.to_string(),
        Some(HParamValue::Int(i)) => i.to_string(),
        Some(HParamValue::Number(x)) => x.to_string(),
        Some(HParamValue::Str(s)) => format!("{s:?}"),
    }
}

/// A value as one space-free word: exact (a float by its bits), so that equal values encode
/// alike and only they do.
fn encode(value: &HParamValue) -> String {
    match value {
        HParamValue::Bool(b) => format!("b{}", u8::from(*b)),
        HParamValue::Int(i) => format!("i{i}"),
        HParamValue::Number(x) => format!("f{:016x}", x.to_bits()),
        HParamValue::Str(s) => format!("s{}", hex::encode(s.as_bytes())),
    }
}

fn decode(word: &str) -> Option<HParamValue> {
    let (kind, rest) = word.split_at_checked(1)?;
    Some(match kind {
        "b" => HParamValue::Bool(match rest {
            "0" => false,
            "1" => true,
            _ => return None,
        }),
        "i" => HParamValue::Int(rest.parse().ok()?),
        "f" => HParamValue::Number(f64::from_bits(u64::from_str_radix(rest, 16).ok()?)),
        "s" => HParamValue::Str(String::from_utf8(hex::decode(rest).ok()?).ok()?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_new_each_time_and_read_back() {
        let (a, b) = (RunId::new(), RunId::new());
        assert_ne!(a, b);
        assert_eq!(RunId::parse(a.as_str()), Some(a.clone()));
        assert_eq!(
            RunId::parse(&format!(" {}\n", a.as_str().to_uppercase())),
            Some(a)
        );
        assert_eq!(RunId::parse("not an id"), None);
        assert_eq!(RunId::parse(&"g".repeat(32)), None);
    }

    #[test]
    fn settings_read_back_exactly_and_every_difference_is_named() {
        let settings = Settings::of(
            &HParams::new()
                .with("learning_rate", 0.1 + 0.2)
                .with("hidden", 64i64)
                .with("optimizer", "adam = best\nline")
                .with("shuffle", true),
        );
        let lines: Vec<String> = settings.meta_lines().collect();
        assert!(
            lines
                .iter()
                .all(|l| !l.contains('\n') && l.split(' ').count() == 2)
        );
        let read = Settings::from_meta(lines.iter().map(|l| &l["setting=".len()..])).unwrap();
        assert_eq!(read, settings);
        assert!(read.differences(&settings).is_empty());
        let other = Settings::of(
            &HParams::new()
                .with("learning_rate", 0.3)
                .with("hidden", 64i64)
                .with("optimizer", "adam = best\nline")
                .with("seed", 7i64),
        );
        assert_eq!(
            settings.differences(&other),
            [
                "learning_rate: 0.30000000000000004 there, 0.3 here",
                "shuffle: true there, none here",
                "seed: none there, 7 here",
            ]
        );
        assert!(Settings::from_meta(["zz i1"].into_iter()).is_err());
        assert!(Settings::from_meta(["6869 q1"].into_iter()).is_err());
    }
}
