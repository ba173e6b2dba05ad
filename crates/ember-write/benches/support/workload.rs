//! The benchmark workloads of `cargo bench -p ember-write` (bench-only code, not part of the
//! crate's API). `ember bench write` makes the same data through the facade's per-value API.
//!
//! Each workload writes one record per step:
//!
//! | name | tags | value at step `s` |
//! |---|---|---|
//! | `scalars` | `loss` | `1/(s+1)` |
//! | `scalars10` | `m0`..`m9` | `1/(s+1+k)` for tag `mk` |
//! | `hist` | `w` | a histogram of one fixed vector of 100,000 `f32` drawn from a standard normal |
//! | `image` | `img` | one fixed 3x64x64 `f32` image (CHW) with values in [0, 1) |
//! | `tensor` | `t` | one fixed vector of 100,000 `f32` in [0, 1) |
//!
//! The fixed data comes from [`SplitMix64`] with seed [`SEED`] (normals by
//! Box–Muller), so every run and every machine sees the same bytes. Wall
//! times are `1.7e9 + s / 1000`, also fixed.

// Not every helper is used by every bench.
#![allow(dead_code, unreachable_pub)]

use ember_write::pack::{Image, ImageLayout, Record, Tag, TensorValue, Value};

/// The seed of every workload's fixed data.
pub const SEED: u64 = 0x000e_4be5_2026;

/// Elements in the `hist` and `tensor` vectors.
pub const VECTOR_LEN: usize = 100_000;

/// Shape of the `image` workload's image: channels, height, width.
pub const IMAGE_SHAPE: [usize; 3] = [3, 64, 64];

/// A tiny deterministic random number generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal value (Box–Muller).
    pub fn next_normal(&mut self) -> f64 {
        // 1 - u is in (0, 1], so the logarithm is finite.
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Which workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// One scalar, tag `loss`.
    Scalars,
    /// Ten scalars, tags `m0`..`m9`.
    Scalars10,
    /// One histogram of 100,000 normal `f32`, tag `w`.
    Hist,
    /// One 3x64x64 `f32` image, tag `img`.
    Image,
    /// One tensor of 100,000 `f32`, tag `t`.
    Tensor,
}

impl WorkloadKind {
    /// Every workload, in the order the benchmarks run them.
    pub const ALL: [WorkloadKind; 5] = [
        WorkloadKind::Scalars,
        WorkloadKind::Scalars10,
        WorkloadKind::Hist,
        WorkloadKind::Image,
        WorkloadKind::Tensor,
    ];

    /// The workload's name (`scalars`, `scalars10`, `hist`, `image`, `tensor`).
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Scalars => "scalars",
            WorkloadKind::Scalars10 => "scalars10",
            WorkloadKind::Hist => "hist",
            WorkloadKind::Image => "image",
            WorkloadKind::Tensor => "tensor",
        }
    }

    /// The workload called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Steps of a full run: 1,000,000 for `scalars` (the figure),
    /// fewer for the heavy workloads so a run takes seconds.
    pub fn default_steps(self) -> u64 {
        match self {
            WorkloadKind::Scalars => 1_000_000,
            WorkloadKind::Scalars10 => 100_000,
            WorkloadKind::Hist => 1_000,
            WorkloadKind::Image => 10_000,
            WorkloadKind::Tensor => 1_000,
        }
    }
}

/// A workload ready to generate records: its tags and fixed data are built once.
#[derive(Debug, Clone)]
pub struct Workload {
    kind: WorkloadKind,
    tags: Vec<Tag>,
    data: Option<Value>,
}

/// Tags from names; workload names are short, non-empty and NUL-free, so
/// none is ever left out.
fn tags<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Vec<Tag> {
    names
        .into_iter()
        .filter_map(|n| Tag::new(n.as_ref()).ok())
        .collect()
}

impl Workload {
    /// Builds `kind`'s tags and fixed data.
    pub fn new(kind: WorkloadKind) -> Self {
        let mut rng = SplitMix64::new(SEED);
        let (tags, data) = match kind {
            WorkloadKind::Scalars => (tags(["loss"]), None),
            WorkloadKind::Scalars10 => (tags((0..10).map(|k| format!("m{k}"))), None),
            WorkloadKind::Hist => {
                let v: Vec<f32> = (0..VECTOR_LEN).map(|_| rng.next_normal() as f32).collect();
                (
                    tags(["w"]),
                    Some(Value::histogram(TensorValue::from_slice(&v, [VECTOR_LEN]))),
                )
            }
            WorkloadKind::Image => {
                let n: usize = IMAGE_SHAPE.iter().product();
                let v: Vec<f32> = (0..n).map(|_| rng.next_f64() as f32).collect();
                let data = TensorValue::from_slice(&v, IMAGE_SHAPE);
                (
                    tags(["img"]),
                    Some(Value::Image(Image::new(data, ImageLayout::Chw))),
                )
            }
            WorkloadKind::Tensor => {
                let v: Vec<f32> = (0..VECTOR_LEN).map(|_| rng.next_f64() as f32).collect();
                (
                    tags(["t"]),
                    Some(Value::Tensor(TensorValue::from_slice(&v, [VECTOR_LEN]))),
                )
            }
        };
        Self { kind, tags, data }
    }

    /// Which workload this is.
    pub fn kind(&self) -> WorkloadKind {
        self.kind
    }

    /// The record of step `step`.
    pub fn record(&self, step: u64) -> Record {
        let s = step as f64;
        let mut record = Record::new(step as i64, 1.7e9 + s / 1000.0);
        for (k, tag) in self.tags.iter().enumerate() {
            match &self.data {
                Some(value) => record.add(tag.clone(), value.clone()),
                None => record.add(tag.clone(), 1.0 / (s + 1.0 + k as f64)),
            };
        }
        record
    }

    /// Bytes of values in one record, before packing (for MB/s figures).
    pub fn value_bytes(&self) -> u64 {
        match self.kind {
            WorkloadKind::Scalars => 8,
            WorkloadKind::Scalars10 => 80,
            WorkloadKind::Hist | WorkloadKind::Tensor => (VECTOR_LEN * 4) as u64,
            WorkloadKind::Image => (IMAGE_SHAPE.iter().product::<usize>() * 4) as u64,
        }
    }
}
