//! Image layout, tiling, scaling and PNG encoding for both formats.

use std::borrow::Cow;

use crate::error::PackErrorKind;
use crate::pack::Format;
use crate::tensor::{DType, TensorValue};
use crate::value::{Image, ImageLayout};

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

/// Image data seen as a batch of `n` images of `c` channels, `h` x `w` pixels, with element
/// strides for each axis.
struct View<'a> {
    data: &'a TensorValue,
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    /// Strides (in elements) of n, c, h, w.
    strides: [usize; 4],
}

impl View<'_> {
    fn new(image: &Image) -> Result<View<'_>, PackErrorKind> {
        image.data.check()?;
        let shape = image.data.shape();
        if shape.len() != image.layout.rank() {
            return Err(PackErrorKind::ImageRank {
                rank: shape.len(),
                layout: image.layout,
            });
        }
        let (n, c, h, w) = match image.layout {
            ImageLayout::Nchw => (shape[0], shape[1], shape[2], shape[3]),
            ImageLayout::Nhwc => (shape[0], shape[3], shape[1], shape[2]),
            ImageLayout::Chw => (1, shape[0], shape[1], shape[2]),
            ImageLayout::Hwc => (1, shape[2], shape[0], shape[1]),
        };
        let strides = match image.layout {
            ImageLayout::Nchw | ImageLayout::Chw => [c * h * w, h * w, w, 1],
            ImageLayout::Nhwc | ImageLayout::Hwc => [h * w * c, 1, w * c, c],
        };
        Ok(View {
            data: &image.data,
            n,
            c,
            h,
            w,
            strides,
        })
    }

    /// Grid geometry: columns, rows, and the canvas size in pixels (height, width).
    fn grid(&self) -> Result<(usize, usize, u32, u32), PackErrorKind> {
        let size_error = || PackErrorKind::ImageSize {
            batch: self.n,
            height: self.h,
            width: self.w,
        };
        if self.n == 0 || self.h == 0 || self.w == 0 {
            return Err(size_error());
        }
        let cols = self.n.min(GRID_COLUMNS);
        let rows = self.n.div_ceil(cols);
        let height = self
            .h
            .checked_mul(rows)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(size_error)?;
        let width = self
            .w
            .checked_mul(cols)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(size_error)?;
        // PNG itself caps dimensions at 2^31 - 1.
        if height > i32::MAX as u32 || width > i32::MAX as u32 {
            return Err(size_error());
        }
        Ok((cols, rows, height, width))
    }

    /// Copies element bytes `src` (one `u8` per element, in the input's layout) into a canvas of
    /// `out_c` channels per pixel, `canvas_w` pixels wide, image `i` in grid cell
    /// (`i / cols`, `i % cols`). A one-channel input fills every output channel.
    fn tile(&self, src: &[u8], cols: usize, canvas_w: usize, out_c: usize, canvas: &mut [u8]) {
        let ch_stride = if self.c == 1 { 0 } else { self.strides[1] };
        for img in 0..self.n {
            let (gy, gx) = (img / cols, img % cols);
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

fn check_dtype(format: Format, dtype: DType) -> Result<(), PackErrorKind> {
    if dtype == DType::U8 || dtype.is_float() {
        Ok(())
    } else {
        Err(PackErrorKind::DType {
            format,
            kind: "image",
            dtype,
        })
    }
}

/// TensorBoard's rounding of a float in [0, 1] to a byte; `as` saturates and maps NaN to 0.
fn unit_to_u8(v: f32) -> u8 {
    (v * 255.0 + 0.5).clamp(0.0, 255.0) as u8
}

/// TensorBoard: 1 (gray), 3 (RGB) or 4 (RGBA) channels; `u8` as is, floats in [0, 1] times 255,
/// rounded and clamped (NaN becomes 0); a batch tiled into a grid of up to 8 columns on a black
/// (transparent for RGBA) canvas.
pub(crate) fn tensorboard(image: &Image) -> Result<Encoded, PackErrorKind> {
    let view = View::new(image)?;
    check_dtype(Format::TensorBoard, image.data.dtype())?;
    if !matches!(view.c, 1 | 3 | 4) {
        return Err(PackErrorKind::ImageChannels {
            format: Format::TensorBoard,
            channels: view.c,
        });
    }
    let (cols, _rows, height, width) = view.grid()?;
    // Every element to u8 in one flat pass, then the bytes into the grid.
    let bytes = view.data.bytes();
    let src: Cow<'_, [u8]> = match view.data.dtype() {
        DType::U8 => Cow::Borrowed(bytes),
        DType::F32 => Cow::Owned(
            bytes
                .chunks_exact(4)
                .map(|b| unit_to_u8(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
        ),
        _ => Cow::Owned(
            view.data
                .to_f64_vec()
                .into_iter()
                .map(|v| unit_to_u8(v as f32))
                .collect(),
        ),
    };
    let mut pixels = vec![0u8; height as usize * width as usize * view.c];
    view.tile(&src, cols, width as usize, view.c, &mut pixels);
    let colorspace = view.c as i32;
    let png = png(width, height, colorspace, &pixels)?;
    Ok(Encoded {
        height,
        width,
        colorspace,
        png,
    })
}

/// MindInsight, as mindspore 2.10's `_summary_adapter.py` packs images: 1 or 3 channels (gray is
/// repeated to RGB); the batch tiled row-major, 8 columns, onto a zero canvas; then, over the whole
/// canvas padding included, values in [0, 1] times 255, else `(x - min) * 255 / (max - min + 1)`,
/// else `x - min`; truncated to `u8` through `f32`. Always RGB.
pub(crate) fn mindinsight(image: &Image) -> Result<Encoded, PackErrorKind> {
    let view = View::new(image)?;
    check_dtype(Format::MindInsight, image.data.dtype())?;
    if !matches!(view.c, 1 | 3) {
        return Err(PackErrorKind::ImageChannels {
            format: Format::MindInsight,
            channels: view.c,
        });
    }
    let (cols, rows, height, width) = view.grid()?;
    // The scaling is per element, so the input's own elements are scaled once and then placed;
    // the canvas's zero padding takes part in min/max when the grid has empty cells.
    let padded = rows * cols > view.n;
    let bytes = view.data.bytes();
    let (src, zero) = match view.data.dtype() {
        // `f32` widens to `f64` exactly, so the fast path computes the same bytes.
        DType::F32 => {
            let elems = bytes.as_chunks::<4>().0;
            mi_scale(elems, padded, |b| f64::from(f32::from_le_bytes(b)))
        }
        _ => {
            let values: Vec<[u8; 8]> = view
                .data
                .to_f64_vec()
                .into_iter()
                .map(f64::to_le_bytes)
                .collect();
            mi_scale(&values, padded, f64::from_le_bytes)
        }
    };
    let mut pixels = vec![zero; height as usize * width as usize * 3];
    view.tile(&src, cols, width as usize, 3, &mut pixels);
    let png = png(width, height, 3, &pixels)?;
    Ok(Encoded {
        height,
        width,
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
