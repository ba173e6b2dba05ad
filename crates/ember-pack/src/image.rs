//! Image layout, tiling, scaling and PNG encoding for both formats.

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

    /// The element index of channel `ch` of pixel (`y`, `x`) of image `img`.
    fn offset(&self, img: usize, ch: usize, y: usize, x: usize) -> usize {
        img * self.strides[0] + ch * self.strides[1] + y * self.strides[2] + x * self.strides[3]
    }
}

/// Reads element `i` of a float or `u8` tensor as `f64`.
fn read(t: &TensorValue, i: usize) -> f64 {
    t.get_f64(i)
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
    encoder.set_compression(png::Compression::Fast);
    let mut writer = encoder
        .write_header()
        .map_err(|e| PackErrorKind::Png(e.to_string()))?;
    writer
        .write_image_data(pixels)
        .map_err(|e| PackErrorKind::Png(e.to_string()))?;
    writer
        .finish()
        .map_err(|e| PackErrorKind::Png(e.to_string()))?;
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
    let c = view.c;
    let canvas_w = width as usize;
    let mut pixels = vec![0u8; height as usize * canvas_w * c];
    let t = view.data;
    let is_u8 = t.dtype() == DType::U8;
    let fast_f32 = t.dtype() == DType::F32;
    let bytes = t.bytes();
    for img in 0..view.n {
        let (gy, gx) = (img / cols, img % cols);
        for y in 0..view.h {
            let row = (gy * view.h + y) * canvas_w + gx * view.w;
            for x in 0..view.w {
                let out = &mut pixels[(row + x) * c..(row + x + 1) * c];
                for (ch, o) in out.iter_mut().enumerate() {
                    let i = view.offset(img, ch, y, x);
                    *o = if is_u8 {
                        bytes[i]
                    } else if fast_f32 {
                        let v = f32::from_le_bytes([
                            bytes[4 * i],
                            bytes[4 * i + 1],
                            bytes[4 * i + 2],
                            bytes[4 * i + 3],
                        ]);
                        // `as` saturates and maps NaN to 0.
                        (v * 255.0 + 0.5).clamp(0.0, 255.0) as u8
                    } else {
                        (read(t, i) * 255.0 + 0.5).clamp(0.0, 255.0) as u8
                    };
                }
            }
        }
    }
    let colorspace = c as i32;
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
    let (cols, _rows, height, width) = view.grid()?;
    let canvas_w = width as usize;
    let mut canvas = vec![0f64; height as usize * canvas_w * 3];
    let t = view.data;
    for img in 0..view.n {
        let (gy, gx) = (img / cols, img % cols);
        for y in 0..view.h {
            let row = (gy * view.h + y) * canvas_w + gx * view.w;
            for x in 0..view.w {
                for ch in 0..3 {
                    let src = if view.c == 1 { 0 } else { ch };
                    canvas[(row + x) * 3 + ch] = read(t, view.offset(img, src, y, x));
                }
            }
        }
    }
    // Over the whole canvas, padding included; numpy's min/max propagate NaN.
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut nan = false;
    for &v in &canvas {
        nan |= v.is_nan();
        min = min.min(v);
        max = max.max(v);
    }
    if nan {
        min = f64::NAN;
        max = f64::NAN;
    }
    let scale: Box<dyn Fn(f64) -> f64> = if 0.0 <= min && max <= 1.0 {
        Box::new(|x| x * 255.0)
    } else if max != min {
        Box::new(move |x| (x - min) * 255.0 / (max - min + 1.0))
    } else {
        Box::new(move |x| x - min)
    };
    let pixels: Vec<u8> = canvas.iter().map(|&x| (scale(x) as f32) as u8).collect();
    let png = png(width, height, 3, &pixels)?;
    Ok(Encoded {
        height,
        width,
        colorspace: 3,
        png,
    })
}
