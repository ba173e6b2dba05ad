//! TensorBoard's embedding projector: the data model of one embedding and the text it is
//! written as (`tensors.tsv`, `metadata.tsv`, the sprite PNG and the `projector_config.pbtxt`
//! entry). Where the files go is the writer's business; this module only encodes them.

use std::fmt::Write as _;

use crate::dtype::DType;
use crate::error::PackErrorKind;
use crate::format::{Format, ImageLayout};
use crate::image::{self, Image};
use crate::tag::Tag;
use crate::tensor::TensorValue;

/// One embedding for TensorBoard's projector: `N` points of `D` dimensions, with optional
/// labels (one per point) and thumbnails (one per point, all the same size), tiled into the
/// sprite the projector draws each point with. TensorBoard only.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    /// The points, a rank-2 `f32` tensor `[N, D]`, `N` and `D` above 0.
    pub matrix: TensorValue,
    /// One label per point, written as `metadata.tsv`; none may hold a tab, a newline or a
    /// carriage return, which would split the projector's rows and columns.
    pub labels: Option<Vec<String>>,
    /// One image per point (layout [`ImageLayout::Chw`] or [`ImageLayout::Hwc`], `u8` or
    /// `f32` in `[0, 1]`, 1, 3 or 4 channels), all of one size and channel count.
    pub thumbnails: Option<Vec<Image>>,
}

impl Embedding {
    /// An embedding of the rows of `matrix`, without labels or thumbnails.
    pub fn new(matrix: TensorValue) -> Embedding {
        Embedding {
            matrix,
            labels: None,
            thumbnails: None,
        }
    }

    /// Sets one label per point.
    pub fn with_labels(mut self, labels: Vec<String>) -> Embedding {
        self.labels = Some(labels);
        self
    }

    /// Sets one thumbnail per point.
    pub fn with_thumbnails(mut self, thumbnails: Vec<Image>) -> Embedding {
        self.thumbnails = Some(thumbnails);
        self
    }

    /// The tests packing makes: a non-empty `[N, D]` `f32` matrix, `N` labels without tabs or
    /// newlines, and `N` thumbnails of one geometry whose sprite fits a PNG. Costs O(N), for
    /// the labels and thumbnails; never O(N·D).
    pub(crate) fn check(&self) -> Result<Shape, PackErrorKind> {
        let m = &self.matrix;
        m.check()?;
        if m.dtype() != DType::F32 {
            return Err(PackErrorKind::DType {
                format: Format::TensorBoard,
                kind: "embedding",
                dtype: m.dtype(),
            });
        }
        let (rows, dims) = match *m.shape() {
            [rows, dims] => (rows, dims),
            _ => {
                return Err(PackErrorKind::InvalidEmbedding(format!(
                    "the matrix has rank {}, not 2",
                    m.shape().len()
                )));
            }
        };
        if rows == 0 || dims == 0 {
            return Err(PackErrorKind::InvalidEmbedding(format!(
                "the matrix of shape [{rows}, {dims}] is empty"
            )));
        }
        // The projector config stores the shape as `uint32`.
        if u32::try_from(rows).is_err() || u32::try_from(dims).is_err() {
            return Err(PackErrorKind::SizeOverflow(
                "an embedding dimension exceeds u32::MAX",
            ));
        }
        if let Some(labels) = &self.labels {
            if labels.len() != rows {
                return Err(PackErrorKind::InvalidEmbedding(format!(
                    "{} labels for {rows} points",
                    labels.len()
                )));
            }
            if let Some(i) = labels.iter().position(|l| l.contains(['\t', '\n', '\r'])) {
                return Err(PackErrorKind::InvalidEmbedding(format!(
                    "label {i} holds a tab or a line break"
                )));
            }
        }
        let sprite = match &self.thumbnails {
            None => None,
            Some(images) => Some(sprite_geometry(images, rows)?),
        };
        Ok(Shape { rows, dims, sprite })
    }
}

/// What [`Embedding::check`] found: the matrix shape and the sprite's geometry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    rows: usize,
    dims: usize,
    sprite: Option<Sprite>,
}

/// One thumbnail's size and channels, and the sprite's cells per side.
#[derive(Clone, Copy, Debug)]
struct Sprite {
    height: usize,
    width: usize,
    channels: usize,
    side: usize,
}

/// Checks the thumbnails: `rows` of them, each one image the TensorBoard image check accepts,
/// all of one geometry, tiled `ceil(sqrt(N))` to a side in a canvas PNG can hold.
fn sprite_geometry(images: &[Image], rows: usize) -> Result<Sprite, PackErrorKind> {
    if images.len() != rows {
        return Err(PackErrorKind::InvalidEmbedding(format!(
            "{} thumbnails for {rows} points",
            images.len()
        )));
    }
    let mut first: Option<(usize, usize, usize)> = None;
    for (i, img) in images.iter().enumerate() {
        if !matches!(img.layout, ImageLayout::Chw | ImageLayout::Hwc) {
            return Err(PackErrorKind::InvalidEmbedding(format!(
                "thumbnail {i} is a batch ({:?}); each thumbnail is one image, chw or hwc",
                img.layout
            )));
        }
        image::check(Format::TensorBoard, img)?;
        let dtype = img.data.dtype();
        if !matches!(dtype, DType::U8 | DType::F32) {
            return Err(PackErrorKind::DType {
                format: Format::TensorBoard,
                kind: "thumbnail",
                dtype,
            });
        }
        let s = img.data.shape();
        let geometry = match img.layout {
            ImageLayout::Chw => (s[1], s[2], s[0]),
            _ => (s[0], s[1], s[2]),
        };
        match first {
            None => first = Some(geometry),
            Some(f) if f != geometry => {
                return Err(PackErrorKind::InvalidEmbedding(format!(
                    "thumbnail {i} is {}x{} with {} channels, thumbnail 0 {}x{} with {}",
                    geometry.1, geometry.0, geometry.2, f.1, f.0, f.2
                )));
            }
            Some(_) => {}
        }
    }
    let Some((height, width, channels)) = first else {
        return Err(PackErrorKind::InvalidEmbedding("no thumbnails".into()));
    };
    let side = ceil_sqrt(rows);
    let too_large = PackErrorKind::ImageSize {
        batch: rows,
        height,
        width,
    };
    let fits = |v: usize| v.checked_mul(side).filter(|&p| i32::try_from(p).is_ok());
    let (h, w) = (
        fits(height).ok_or(too_large.clone())?,
        fits(width).ok_or(too_large.clone())?,
    );
    h.checked_mul(w)
        .and_then(|p| p.checked_mul(channels))
        .filter(|&n| isize::try_from(n).is_ok())
        .ok_or(too_large)?;
    Ok(Sprite {
        height,
        width,
        channels,
        side,
    })
}

/// `ceil(sqrt(n))`, exactly, for any `usize`.
fn ceil_sqrt(n: usize) -> usize {
    let mut r = (n as f64).sqrt() as usize;
    while r.saturating_mul(r) < n {
        r += 1;
    }
    while r > 0 && (r - 1).saturating_mul(r - 1) >= n {
        r -= 1;
    }
    r
}

/// The encoded files of one embedding, for the writer to store under a directory of its
/// choosing and list in the run's `projector_config.pbtxt` ([`ProjectorFiles::config_entry`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectorFiles {
    /// The tag it was recorded under.
    pub tag: Tag,
    /// The step it was recorded at.
    pub step: i64,
    /// `tensors.tsv`: `N` lines of `D` tab-separated values, each the shortest decimal that
    /// reads back as the same `f32` (`NaN`, `inf`, `-inf` as Python's `float` reads them).
    pub tensors: Vec<u8>,
    /// `metadata.tsv`: one label per line, no header (TensorBoard reads a first line with a
    /// tab as a header, and a single column has none).
    pub metadata: Option<Vec<u8>>,
    /// `sprite.png`: the thumbnails tiled row-major into a square grid of `ceil(sqrt(N))`
    /// cells to a side, unused cells black (transparent for RGBA).
    pub sprite: Option<Vec<u8>>,
    /// `[N, D]`.
    pub shape: [u32; 2],
    /// One thumbnail's `[width, height]`, when there is a sprite.
    pub single_image_dim: Option<[u32; 2]>,
}

/// The file names inside an embedding's directory.
pub mod file_names {
    /// The points.
    pub const TENSORS: &str = "tensors.tsv";
    /// The labels.
    pub const METADATA: &str = "metadata.tsv";
    /// The thumbnails.
    pub const SPRITE: &str = "sprite.png";
    /// The run's config, at the root of the log directory.
    pub const CONFIG: &str = "projector_config.pbtxt";
}

impl ProjectorFiles {
    /// The projector's name for the embedding: `<tag>:<step>` with the step in at least five
    /// digits, as tensorboardX names it (never ending in `:0`, which the plugin strips).
    pub fn tensor_name(&self) -> String {
        format!("{}:{:05}", self.tag.as_str(), self.step)
    }

    /// The `embeddings { ... }` block of `projector_config.pbtxt` (text format of
    /// `ProjectorConfig.embeddings`), its paths `dir/<file>` relative to the config's
    /// directory; `dir` uses `/` as separator.
    pub fn config_entry(&self, dir: &str) -> String {
        let mut out = String::from("embeddings {\n");
        let _ = writeln!(out, "  tensor_name: {}", pbtxt_string(&self.tensor_name()));
        let path = |name: &str| pbtxt_string(&format!("{dir}/{name}"));
        let _ = writeln!(out, "  tensor_path: {}", path(file_names::TENSORS));
        if self.metadata.is_some() {
            let _ = writeln!(out, "  metadata_path: {}", path(file_names::METADATA));
        }
        if let (Some(_), Some([w, h])) = (&self.sprite, self.single_image_dim) {
            let _ = writeln!(
                out,
                "  sprite {{\n    image_path: {}\n    single_image_dim: [{w}, {h}]\n  }}",
                path(file_names::SPRITE)
            );
        }
        let [n, d] = self.shape;
        let _ = writeln!(out, "  tensor_shape: [{n}, {d}]");
        out.push_str("}\n");
        out
    }
}

/// A protobuf text-format string literal: double-quoted, with `\\`, `\"`, `\'`, `\n`, `\r`,
/// `\t` escaped and other control bytes as octal; UTF-8 beyond ASCII as is, which the text
/// format parser reads.
pub fn pbtxt_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\{:03o}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Encodes a checked embedding.
pub(crate) fn encode(
    tag: &Tag,
    step: i64,
    e: &Embedding,
    shape: Shape,
) -> Result<ProjectorFiles, PackErrorKind> {
    let Shape { rows, dims, sprite } = shape;
    let values = e.matrix.bytes().chunks_exact(4);
    let mut tensors = String::with_capacity(rows * dims * 10);
    for (i, v) in values.enumerate() {
        let v = f32::from_le_bytes([v[0], v[1], v[2], v[3]]);
        let _ = write!(tensors, "{v}");
        tensors.push(if (i + 1) % dims == 0 { '\n' } else { '\t' });
    }
    let metadata = e.labels.as_ref().map(|labels| {
        let mut text = String::new();
        for l in labels {
            text.push_str(l);
            text.push('\n');
        }
        text.into_bytes()
    });
    let (sprite, single_image_dim) = match (&e.thumbnails, sprite) {
        (Some(images), Some(g)) => {
            let png = sprite_png(images, g)?;
            (Some(png), Some([g.width as u32, g.height as u32]))
        }
        _ => (None, None),
    };
    Ok(ProjectorFiles {
        tag: tag.clone(),
        step,
        tensors: tensors.into_bytes(),
        metadata,
        sprite,
        shape: [rows as u32, dims as u32],
        single_image_dim,
    })
}

/// Tiles the thumbnails row-major into a `side` × `side` grid, scaled as TensorBoard's image
/// summaries scale (`u8` as is; `f32` times 255, rounded, clamped, NaN as 0), as PNG.
fn sprite_png(images: &[Image], g: Sprite) -> Result<Vec<u8>, PackErrorKind> {
    let Sprite {
        height,
        width,
        channels,
        side,
    } = g;
    let canvas_w = width * side;
    let mut canvas = vec![0u8; canvas_w * height * side * channels];
    for (i, img) in images.iter().enumerate() {
        let (gy, gx) = (i / side, i % side);
        let bytes = img.data.bytes();
        let f32_dtype = img.data.dtype() == DType::F32;
        for y in 0..height {
            for x in 0..width {
                for c in 0..channels {
                    let at = match img.layout {
                        ImageLayout::Chw => (c * height + y) * width + x,
                        _ => (y * width + x) * channels + c,
                    };
                    let v = if f32_dtype {
                        let b = &bytes[at * 4..at * 4 + 4];
                        let f = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                        // `as` saturates and maps NaN to 0.
                        (f * 255.0 + 0.5).clamp(0.0, 255.0) as u8
                    } else {
                        bytes[at]
                    };
                    let px = (gy * height + y) * canvas_w + gx * width + x;
                    canvas[px * channels + c] = v;
                }
            }
        }
    }
    let side_px = |v: usize| (v * side) as u32;
    image::png(side_px(width), side_px(height), channels as i32, &canvas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_sqrt_is_exact() {
        for (n, r) in [(1, 1), (2, 2), (4, 2), (5, 3), (9, 3), (10, 4), (359, 19)] {
            assert_eq!(ceil_sqrt(n), r, "{n}");
        }
    }

    #[test]
    fn pbtxt_strings_escape_quotes_and_controls() {
        assert_eq!(pbtxt_string("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\001é\"");
    }
}
