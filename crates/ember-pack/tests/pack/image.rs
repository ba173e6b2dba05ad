//! Images decode back (with the png crate) to the expected pixels, in both formats.

use ember_pack::proto::mindspore as msp;
use ember_pack::proto::tensorboard as tbp;
use ember_pack::{
    Format, Image, ImageLayout, MetadataFor, PackErrorKind, PackOptions, Packer, Record, Tag,
    TensorValue,
};
use prost::Message;

/// Decodes a PNG into (width, height, channels, pixels).
fn decode(png_bytes: &[u8]) -> (u32, u32, usize, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes.to_vec()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    (info.width, info.height, info.color_type.samples(), buf)
}

fn pack(format: Format, image: Image) -> Result<(i32, i32, i32, Vec<u8>), PackErrorKind> {
    let mut record = Record::new(1, 1.0);
    record.add(Tag::new("img").unwrap(), image);
    let mut packed = Packer::new(PackOptions::new(format)).pack(&record, MetadataFor::All);
    if let Some(e) = packed.rejected.pop() {
        assert_eq!(e.tag.as_str(), "img");
        return Err(e.kind);
    }
    let bytes = &packed.items[0].bytes;
    Ok(match format {
        Format::TensorBoard => {
            let event = tbp::Event::decode(bytes.as_slice()).unwrap();
            let Some(tbp::event::What::Summary(s)) = event.what else {
                panic!()
            };
            let Some(tbp::summary::value::Value::Image(i)) = s.value[0].value.clone() else {
                panic!()
            };
            (i.height, i.width, i.colorspace, i.encoded_image_string)
        }
        Format::MindInsight => {
            let event = msp::Event::decode(bytes.as_slice()).unwrap();
            let Some(msp::event::What::Summary(s)) = event.what else {
                panic!()
            };
            let Some(msp::summary::value::Value::Image(i)) = s.value[0].value.clone() else {
                panic!()
            };
            (i.height, i.width, i.colorspace, i.encoded_image)
        }
    })
}

/// A deterministic NCHW batch of `n` images, `c` channels, `h` x `w`, values from `f`.
fn nchw(
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    f: impl Fn(usize, usize, usize, usize) -> f32,
) -> Vec<f32> {
    let mut v = Vec::new();
    for i in 0..n {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    v.push(f(i, ch, y, x));
                }
            }
        }
    }
    v
}

#[test]
fn tensorboard_float_chw_is_scaled_and_rounded() {
    let data = nchw(1, 3, 4, 5, |_, c, y, x| {
        ((c * 20 + y * 5 + x) as f32 / 59.0) * 1.2 - 0.1
    });
    let image = Image::new(
        TensorValue::from_slice(&data, [3usize, 4, 5]),
        ImageLayout::Chw,
    );
    let (h, w, colorspace, png) = pack(Format::TensorBoard, image).unwrap();
    assert_eq!((h, w, colorspace), (4, 5, 3));
    let (pw, ph, channels, pixels) = decode(&png);
    assert_eq!((pw, ph, channels), (5, 4, 3));
    for y in 0..4 {
        for x in 0..5 {
            for c in 0..3 {
                let v = data[c * 20 + y * 5 + x];
                let want = (f64::from(v) * 255.0).round().clamp(0.0, 255.0) as u8;
                assert_eq!(pixels[(y * 5 + x) * 3 + c], want, "({y},{x},{c})");
            }
        }
    }
}

#[test]
fn tensorboard_batch_is_tiled_eight_wide() {
    // 10 gray 2x3 u8 images in NHWC: 8 columns, 2 rows, black padding.
    let (n, hh, ww) = (10usize, 2usize, 3usize);
    let data: Vec<u8> = (0..n * hh * ww).map(|i| (i * 7 % 251) as u8 + 1).collect();
    let image = Image::new(
        TensorValue::from_slice(&data, [n, hh, ww, 1]),
        ImageLayout::Nhwc,
    );
    let (h, w, colorspace, png) = pack(Format::TensorBoard, image).unwrap();
    assert_eq!((h, w, colorspace), (4, 24, 1));
    let (_, _, channels, pixels) = decode(&png);
    assert_eq!(channels, 1);
    for gy in 0..2 {
        for gx in 0..8 {
            let img = gy * 8 + gx;
            for y in 0..hh {
                for x in 0..ww {
                    let got = pixels[(gy * hh + y) * 24 + gx * ww + x];
                    let want = if img < n {
                        data[(img * hh + y) * ww + x]
                    } else {
                        0
                    };
                    assert_eq!(got, want, "image {img} ({y},{x})");
                }
            }
        }
    }
}

#[test]
fn tensorboard_rgba_hwc_u8() {
    let data: Vec<u8> = (0..2 * 2 * 4).map(|i| i as u8 * 13).collect();
    let image = Image::new(
        TensorValue::from_slice(&data, [2usize, 2, 4]),
        ImageLayout::Hwc,
    );
    let (_, _, colorspace, png) = pack(Format::TensorBoard, image).unwrap();
    assert_eq!(colorspace, 4);
    let (_, _, channels, pixels) = decode(&png);
    assert_eq!((channels, pixels), (4, data));
}

/// MindSpore's rule, written from the reference: tile (8 columns) onto a zero RGB canvas, scale
/// over the canvas, truncate through f32.
fn mindspore_expected(
    data: &[f32],
    n: usize,
    c: usize,
    h: usize,
    w: usize,
) -> (usize, usize, Vec<u8>) {
    let cols = n.min(8);
    let rows = n.div_ceil(cols);
    let (ch, cw) = (h * rows, w * cols);
    let mut canvas = vec![0f64; ch * cw * 3];
    for i in 0..n {
        for k in 0..3 {
            let src = if c == 1 { 0 } else { k };
            for y in 0..h {
                for x in 0..w {
                    let v = f64::from(data[((i * c + src) * h + y) * w + x]);
                    canvas[((i / cols * h + y) * cw + i % cols * w + x) * 3 + k] = v;
                }
            }
        }
    }
    let min = canvas.iter().copied().fold(f64::INFINITY, f64::min);
    let max = canvas.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let pixels = canvas
        .iter()
        .map(|&x| {
            let y = if 0.0 <= min && max <= 1.0 {
                x * 255.0
            } else if max != min {
                (x - min) * 255.0 / (max - min + 1.0)
            } else {
                x - min
            };
            y as f32 as u8
        })
        .collect();
    (ch, cw, pixels)
}

fn check_mindspore(data: Vec<f32>, n: usize, c: usize, h: usize, w: usize) {
    let image = Image::new(
        TensorValue::from_slice(&data, [n, c, h, w]),
        ImageLayout::Nchw,
    );
    let (ph, pw, colorspace, png) = pack(Format::MindInsight, image).unwrap();
    let (eh, ew, want) = mindspore_expected(&data, n, c, h, w);
    assert_eq!((ph as usize, pw as usize, colorspace), (eh, ew, 3));
    let (_, _, channels, pixels) = decode(&png);
    assert_eq!(channels, 3);
    assert_eq!(pixels, want);
}

#[test]
fn mindspore_unit_range_is_times_255() {
    check_mindspore(
        nchw(2, 3, 4, 4, |i, c, y, x| ((i + c + y + x) % 7) as f32 / 6.0),
        2,
        3,
        4,
        4,
    );
}

#[test]
fn mindspore_other_range_is_min_max_scaled_with_padding() {
    // 9 images: 8 columns, 2 rows, 7 padding cells of zeros that take part in min/max.
    check_mindspore(
        nchw(9, 3, 3, 2, |i, c, y, x| {
            5.0 + (i * 3 + c + y * 2 + x) as f32 * 0.7
        }),
        9,
        3,
        3,
        2,
    );
    check_mindspore(
        nchw(3, 1, 5, 5, |i, _, y, x| {
            (i as f32 - 1.0) * 40.0 + (y * x) as f32
        }),
        3,
        1,
        5,
        5,
    );
}

#[test]
fn mindspore_constant_image_is_black() {
    check_mindspore(vec![7.0; 2 * 3 * 2 * 2], 2, 3, 2, 2);
    let (_, _, _, png) = pack(
        Format::MindInsight,
        Image::new(
            TensorValue::from_slice(&[7.0f32; 12], [1usize, 3, 2, 2]),
            ImageLayout::Nchw,
        ),
    )
    .unwrap();
    assert!(decode(&png).3.iter().all(|&p| p == 0));
}

#[test]
fn mindspore_u8_is_rescaled_too() {
    // The u8 branch of MindSpore is dead code: u8 data is min/max scaled like any other.
    let data: Vec<u8> = (0..3 * 2 * 2).map(|i| (i * 20) as u8).collect();
    let image = Image::new(
        TensorValue::from_slice(&data, [1usize, 3, 2, 2]),
        ImageLayout::Nchw,
    );
    let (_, _, _, png) = pack(Format::MindInsight, image).unwrap();
    let as_f32: Vec<f32> = data.iter().map(|&b| f32::from(b)).collect();
    assert_eq!(decode(&png).3, mindspore_expected(&as_f32, 1, 3, 2, 2).2);
}

#[test]
fn bad_images_are_typed_errors() {
    let rgba = Image::new(
        TensorValue::from_slice(&[0.5f32; 16], [1usize, 4, 2, 2]),
        ImageLayout::Nchw,
    );
    assert_eq!(
        pack(Format::MindInsight, rgba).unwrap_err(),
        PackErrorKind::ImageChannels {
            format: Format::MindInsight,
            channels: 4
        }
    );
    let two = Image::new(
        TensorValue::from_slice(&[0.5f32; 8], [1usize, 2, 2, 2]),
        ImageLayout::Nchw,
    );
    assert!(matches!(
        pack(Format::TensorBoard, two).unwrap_err(),
        PackErrorKind::ImageChannels { channels: 2, .. }
    ));
    let rank = Image::new(
        TensorValue::from_slice(&[0.5f32; 4], [2usize, 2]),
        ImageLayout::Chw,
    );
    assert!(matches!(
        pack(Format::TensorBoard, rank).unwrap_err(),
        PackErrorKind::ImageRank { rank: 2, .. }
    ));
    let ints = Image::new(
        TensorValue::from_slice(&[1i32; 4], [1usize, 2, 2]),
        ImageLayout::Chw,
    );
    assert!(matches!(
        pack(Format::TensorBoard, ints).unwrap_err(),
        PackErrorKind::DType { .. }
    ));
    let empty = Image::new(
        TensorValue::from_slice::<f32>(&[], [0usize, 3, 2, 2]),
        ImageLayout::Nchw,
    );
    assert!(matches!(
        pack(Format::MindInsight, empty).unwrap_err(),
        PackErrorKind::ImageSize { .. }
    ));
    let short = Image::new(
        TensorValue::new(ember_pack::DType::F32, [3usize, 2, 2], vec![0; 5]),
        ImageLayout::Chw,
    );
    assert!(matches!(
        pack(Format::TensorBoard, short).unwrap_err(),
        PackErrorKind::ByteLength { .. }
    ));
}
