//! Image layout, tiling, scaling and PNG encoding for both formats.

use std::borrow::Cow;

use crate::dtype::DType;
use crate::error::PackErrorKind;
use crate::format::{Format, ImageLayout};
use crate::tensor::{TensorValue, buffer_len};

/// One image or a batch, as `u8` (0-255) or float data. TensorBoard scales floats in [0, 1] to
/// 0-255 and tiles a batch into a grid; MindInsight follows MindSpore's own rules.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    /// The pixels, `u8` or a float dtype.
    pub data: TensorValue,
    /// The axis order of `data`.
    pub layout: ImageLayout,
}

impl Image {
    /// An image or batch from data and its layout.
    pub fn new(data: TensorValue, layout: ImageLayout) -> Image {
        Image { data, layout }
    }
}

/// Columns of the grid a batch is tiled into, in both formats.
pub(crate) const GRID_COLUMNS: usize = 8;

/// An encoded image, ready for a summary value.
#[derive(Debug)]
pub(crate) struct Encoded {
    pub(crate) height: u32,
    pub(crate) width: u32,
    /// 1 gray, 3 RGB, 4 RGBA.
    pub(crate) colorspace: i32,
    pub(crate) png: Vec<u8>,
}

/// A checked image seen as a batch of `n` images of `c` channels, `h` x `w` pixels, with element
/// strides for each axis, and the grid it is tiled into. Every size here was computed with
/// checked arithmetic from the shape, so encoding needs no further test.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    /// Strides (in elements) of n, c, h, w.
    strides: [usize; 4],
    /// Grid columns.
    cols: usize,
    /// Canvas height and width in pixels.
    height: u32,
    width: u32,
    /// Bytes of the canvas: `height * width` pixels of the format's output channels.
    canvas_len: usize,
}

/// Checks an image for `format`, in this order: bytes matching the shape, rank for the layout,
/// dtype, channel count, then every size (see [`Geometry`]). Costs O(rank), whatever the data.
pub(crate) fn check(format: Format, image: &Image) -> Result<Geometry, PackErrorKind> {
    image.data.check()?;
    let shape = image.data.shape();
    if shape.len() != image.layout.rank() {
        return Err(PackErrorKind::ImageRank {
            rank: shape.len(),
            layout: image.layout,
        });
    }
    let dtype = image.data.dtype();
    if !(dtype == DType::U8 || dtype.is_float()) {
        return Err(PackErrorKind::DType {
            format,
            kind: "image",
            dtype,
        });
    }
    let (n, c, h, w) = match image.layout {
        ImageLayout::Nchw => (shape[0], shape[1], shape[2], shape[3]),
        ImageLayout::Nhwc => (shape[0], shape[3], shape[1], shape[2]),
        ImageLayout::Chw => (1, shape[0], shape[1], shape[2]),
        ImageLayout::Hwc => (1, shape[2], shape[0], shape[1]),
    };
    let (channels_ok, out_c) = match format {
        Format::TensorBoard => (matches!(c, 1 | 3 | 4), c),
        Format::MindInsight => (matches!(c, 1 | 3), 3),
    };
    if !channels_ok {
        return Err(PackErrorKind::ImageChannels {
            format,
            channels: c,
        });
    }
    let size_error = PackErrorKind::ImageSize {
        batch: n,
        height: h,
        width: w,
    };
    // Until a zero dimension is ruled out the bytes bound nothing (an empty batch can claim any
    // image size), so every product is checked.
    let mul = |a: usize, b: usize| a.checked_mul(b).ok_or(size_error.clone());
    let strides = match image.layout {
        ImageLayout::Nchw | ImageLayout::Chw => [mul(mul(c, h)?, w)?, mul(h, w)?, w, 1],
        ImageLayout::Nhwc | ImageLayout::Hwc => [mul(mul(h, w)?, c)?, 1, mul(w, c)?, c],
    };
    if n == 0 || h == 0 || w == 0 {
        return Err(size_error);
    }
    let cols = n.min(GRID_COLUMNS);
    let rows = n.div_ceil(cols);
    let (height, width) = (mul(h, rows)?, mul(w, cols)?);
    let canvas_len = buffer_len(mul(height, width)?, out_c).ok_or(size_error.clone())?;
    // PNG caps dimensions at 2^31 - 1, and both formats store them as `int32`.
    let dim = |v: usize| {
        u32::try_from(v)
            .ok()
            .filter(|&v| i32::try_from(v).is_ok())
            .ok_or(size_error.clone())
    };
    let (height, width) = (dim(height)?, dim(width)?);
    // Dtypes without a fast path are widened to `f64` before they are scaled.
    let fast = matches!(
        (format, dtype),
        (Format::TensorBoard, DType::U8 | DType::F32) | (Format::MindInsight, DType::F32)
    );
    if !fast && buffer_len(image.data.element_count(), 8).is_none() {
        return Err(size_error);
    }
    Ok(Geometry {
        n,
        c,
        h,
        w,
        strides,
        cols,
        height,
        width,
        canvas_len,
    })
}

impl Geometry {
    /// Copies element bytes `src` (one `u8` per element, in the input's layout) into a canvas of
    /// `out_c` channels per pixel, image `i` in grid cell (`i / cols`, `i % cols`). A one-channel
    /// input fills every output channel.
    fn tile(&self, src: &[u8], out_c: usize, canvas: &mut [u8]) {
        let canvas_w = self.width as usize;
        let ch_stride = if self.c == 1 { 0 } else { self.strides[1] };
        for img in 0..self.n {
            let (gy, gx) = (img / self.cols, img % self.cols);
            for y in 0..self.h {
                let row = (gy * self.h + y) * canvas_w + gx * self.w;
                let base = img * self.strides[0] + y * self.strides[2];
                let out = &mut canvas[row * out_c..(row + self.w) * out_c];
                if self.strides[3] == out_c && ch_stride == 1 {
                    // Channels-last with matching channel count: the row is one copy.
                    out.copy_from_slice(&src[base..base + self.w * out_c]);
                    continue;
                }
                for (x, pixel) in out.chunks_exact_mut(out_c).enumerate() {
                    let at = base + x * self.strides[3];
                    for (ch, p) in pixel.iter_mut().enumerate() {
                        *p = src[at + ch * ch_stride];
                    }
                }
            }
        }
    }
}

/// Encodes pixels (`colorspace` channels per pixel, row-major) as PNG, with fast settings.
pub(crate) fn png(
    width: u32,
    height: u32,
    colorspace: i32,
    pixels: &[u8],
) -> Result<Vec<u8>, PackErrorKind> {
    let color = match colorspace {
        1 => png::ColorType::Grayscale,
        4 => png::ColorType::Rgba,
        _ => png::ColorType::Rgb,
    };
    let mut out = Vec::with_capacity(pixels.len() / 2 + 64);
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(color);
    encoder.set_depth(png::BitDepth::Eight);
    // Measured on 64x64 RGB: Fast + Up takes ~60% of Fast + Adaptive's time for ~20% larger
    // files; NoFilter is a little faster again but ~60% larger.
    encoder.set_compression(png::Compression::Fast);
    encoder.set_filter(png::Filter::Up);
    let png_error = |e: png::EncodingError| PackErrorKind::Png(e.to_string());
    let mut writer = encoder.write_header().map_err(png_error)?;
    writer.write_image_data(pixels).map_err(png_error)?;
    writer.finish().map_err(png_error)?;
    Ok(out)
}

/// TensorBoard's rounding of a float in [0, 1] to a byte; `as` saturates and maps NaN to 0.
fn unit_to_u8(v: f32) -> u8 {
    (v * 255.0 + 0.5).clamp(0.0, 255.0) as u8
}

/// TensorBoard: 1 (gray), 3 (RGB) or 4 (RGBA) channels; `u8` as is, floats in [0, 1] times 255,
/// rounded and clamped (NaN becomes 0); a batch tiled into a grid of up to 8 columns on a black
/// (transparent for RGBA) canvas. `g` is what [`check`] gave for `image` and TensorBoard.
pub(crate) fn tensorboard(image: &Image, g: &Geometry) -> Result<Encoded, PackErrorKind> {
    // Every element to u8 in one flat pass, then the bytes into the grid.
    let bytes = image.data.bytes();
    let src: Cow<'_, [u8]> = match image.data.dtype() {
        DType::U8 => Cow::Borrowed(bytes),
        DType::F32 => Cow::Owned(
            bytes
                .chunks_exact(4)
                .map(|b| unit_to_u8(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
        ),
        _ => Cow::Owned(
            image
                .data
                .to_f64_vec()
                .into_iter()
                .map(|v| unit_to_u8(v as f32))
                .collect(),
        ),
    };
    let mut pixels = vec![0u8; g.canvas_len];
    g.tile(&src, g.c, &mut pixels);
    let colorspace = g.c as i32;
    let png = png(g.width, g.height, colorspace, &pixels)?;
    Ok(Encoded {
        height: g.height,
        width: g.width,
        colorspace,
        png,
    })
}

/// MindInsight, as mindspore 2.10's `_summary_adapter.py` packs images: 1 or 3 channels (gray is
/// repeated to RGB); the batch tiled row-major, 8 columns, onto a zero canvas; then, over the whole
/// canvas padding included, values in [0, 1] times 255, else `(x - min) * 255 / (max - min + 1)`,
/// else `x - min`; truncated to `u8` through `f32`. Always RGB. `g` is what [`check`] gave for
/// `image` and MindInsight.
pub(crate) fn mindinsight(image: &Image, g: &Geometry) -> Result<Encoded, PackErrorKind> {
    // The scaling is per element, so the input's own elements are scaled once and then placed;
    // the canvas's zero padding takes part in min/max when the grid has empty cells.
    let padded = !g.n.is_multiple_of(g.cols);
    let bytes = image.data.bytes();
    let (src, zero) = match image.data.dtype() {
        // `f32` widens to `f64` exactly, so the fast path computes the same bytes.
        DType::F32 => {
            let elems = bytes.as_chunks::<4>().0;
            mi_scale(elems, padded, |b| f64::from(f32::from_le_bytes(b)))
        }
        _ => {
            let values: Vec<[u8; 8]> = image
                .data
                .to_f64_vec()
                .into_iter()
                .map(f64::to_le_bytes)
                .collect();
            mi_scale(&values, padded, f64::from_le_bytes)
        }
    };
    let mut pixels = vec![zero; g.canvas_len];
    g.tile(&src, 3, &mut pixels);
    let png = png(g.width, g.height, 3, &pixels)?;
    Ok(Encoded {
        height: g.height,
        width: g.width,
        colorspace: 3,
        png,
    })
}

/// MindInsight's scaling of every element (read by `conv`) to a byte, with `padded` when zero
/// canvas padding takes part in min/max. Returns the scaled elements and the padding's byte.
#[inline(always)]
fn mi_scale<const N: usize>(
    elems: &[[u8; N]],
    padded: bool,
    conv: impl Fn([u8; N]) -> f64 + Copy,
) -> (Vec<u8>, u8) {
    // Four lanes break the min/max dependency chains. Lane order can only change the sign of a
    // zero extreme, which no result below depends on (it only ever meets `+ 1`, `- x` or `as`).
    let start = if padded {
        (0.0f64, 0.0f64)
    } else {
        (f64::INFINITY, f64::NEG_INFINITY)
    };
    let mut min = [start.0; 4];
    let mut max = [start.1; 4];
    let mut nan = false;
    let (quads, rest) = elems.as_chunks::<4>();
    for q in quads {
        for j in 0..4 {
            let v = conv(q[j]);
            nan |= v.is_nan();
            min[j] = min[j].min(v);
            max[j] = max[j].max(v);
        }
    }
    for &e in rest {
        let v = conv(e);
        nan |= v.is_nan();
        min[0] = min[0].min(v);
        max[0] = max[0].max(v);
    }
    let (mut min, mut max) = (
        min[0].min(min[1]).min(min[2].min(min[3])),
        max[0].max(max[1]).max(max[2].max(max[3])),
    );
    if nan {
        // numpy's min/max propagate NaN, and so does the arithmetic below.
        (min, max) = (f64::NAN, f64::NAN);
    }
    if 0.0 <= min && max <= 1.0 {
        map_with(elems, conv, |x| x * 255.0)
    } else if max != min {
        let range = max - min + 1.0;
        map_with(elems, conv, move |x| (x - min) * 255.0 / range)
    } else {
        map_with(elems, conv, move |x| x - min)
    }
}

/// Every element (read by `conv`) and the padding's zero through `f`, to bytes as
/// `astype(np.float32).astype(np.uint8)` does: `as` truncates (and maps NaN to 0).
#[inline(always)]
fn map_with<const N: usize>(
    elems: &[[u8; N]],
    conv: impl Fn([u8; N]) -> f64,
    f: impl Fn(f64) -> f64,
) -> (Vec<u8>, u8) {
    let to_u8 = |y: f64| (y as f32) as u8;
    (
        elems.iter().map(|&e| to_u8(f(conv(e)))).collect(),
        to_u8(f(0.0)),
    )
}
