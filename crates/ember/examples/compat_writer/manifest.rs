//! The manifest of raw inputs the Python checks compute their expectations from, and the bits of
//! JSON it is written with.

use std::fmt::Write as _;

/// The manifest, built by hand: the example uses no JSON crate (ember has none as a dependency).
#[derive(Default)]
pub(super) struct Manifest {
    sections: Vec<(String, String)>,
}

impl Manifest {
    pub(super) fn add(&mut self, key: &str, json: String) {
        self.sections.push((key.to_string(), json));
    }

    pub(super) fn render(&self) -> String {
        let body: Vec<String> = self
            .sections
            .iter()
            .map(|(k, v)| format!("  {}: {}", json_str(k), v))
            .collect();
        format!("{{\n{}\n}}\n", body.join(",\n"))
    }
}

/// A JSON string literal.
pub(super) fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number as Python's `json` module reads it: the shortest round-trip decimal, or the
/// `NaN`/`Infinity` tokens it accepts.
pub(super) fn json_num(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x == f64::INFINITY {
        "Infinity".into()
    } else if x == f64::NEG_INFINITY {
        "-Infinity".into()
    } else {
        format!("{x:?}")
    }
}

pub(super) fn json_nums(xs: impl IntoIterator<Item = f64>) -> String {
    let items: Vec<String> = xs.into_iter().map(json_num).collect();
    format!("[{}]", items.join(","))
}

pub(super) fn json_strs<S: AsRef<str>>(xs: impl IntoIterator<Item = S>) -> String {
    let items: Vec<String> = xs.into_iter().map(|s| json_str(s.as_ref())).collect();
    format!("[{}]", items.join(","))
}

pub(super) fn json_list(items: Vec<String>) -> String {
    format!("[{}]", items.join(","))
}
