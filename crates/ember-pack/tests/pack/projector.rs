//! Embeddings whose parts do not agree are refused with typed errors before anything is
//! encoded; MindInsight, which has no projector, refuses them naming the format.

use ember_pack::{
    DType, Embedding, Format, Image, ImageLayout, PackErrorKind, PackOptions, Packer, Tag,
    TensorValue, Value,
};

fn check(format: Format, e: Embedding) -> Result<(), PackErrorKind> {
    let packer = Packer::new(PackOptions::new(format));
    packer
        .check(&Tag::new("e").unwrap(), &Value::from(e))
        .map_err(|err| err.kind)
}

fn matrix(n: usize, d: usize) -> TensorValue {
    TensorValue::from_slice(&vec![0.5f32; n * d], vec![n, d])
}

fn gray(h: usize, w: usize) -> Image {
    Image::new(
        TensorValue::from_slice(&vec![0u8; h * w], vec![1, h, w]),
        ImageLayout::Chw,
    )
}

fn invalid(result: Result<(), PackErrorKind>) -> String {
    match result {
        Err(PackErrorKind::InvalidEmbedding(m)) => m,
        other => panic!("expected InvalidEmbedding, got {other:?}"),
    }
}

#[test]
fn a_good_embedding_passes() {
    let e = Embedding::new(matrix(3, 2))
        .with_labels(vec!["a".into(), "b".into(), "c".into()])
        .with_thumbnails(vec![gray(4, 4); 3]);
    check(Format::TensorBoard, e).unwrap();
}

#[test]
fn label_and_thumbnail_counts_must_match_the_points() {
    let m = invalid(check(
        Format::TensorBoard,
        Embedding::new(matrix(3, 2)).with_labels(vec!["a".into()]),
    ));
    assert_eq!(m, "1 labels for 3 points");
    let m = invalid(check(
        Format::TensorBoard,
        Embedding::new(matrix(3, 2)).with_thumbnails(vec![gray(4, 4); 4]),
    ));
    assert_eq!(m, "4 thumbnails for 3 points");
}

#[test]
fn thumbnails_of_different_sizes_are_refused() {
    let m = invalid(check(
        Format::TensorBoard,
        Embedding::new(matrix(2, 2)).with_thumbnails(vec![gray(4, 4), gray(4, 5)]),
    ));
    assert!(m.starts_with("thumbnail 1 is 5x4"), "{m}");
}

#[test]
fn an_empty_or_misshapen_matrix_is_refused() {
    let m = invalid(check(Format::TensorBoard, Embedding::new(matrix(0, 4))));
    assert_eq!(m, "the matrix of shape [0, 4] is empty");
    let m = invalid(check(
        Format::TensorBoard,
        Embedding::new(TensorValue::from_slice(&[1.0f32; 4], vec![4])),
    ));
    assert_eq!(m, "the matrix has rank 1, not 2");
    assert!(matches!(
        check(
            Format::TensorBoard,
            Embedding::new(TensorValue::from_slice(&[1.0f64; 4], vec![2, 2]))
        ),
        Err(PackErrorKind::DType {
            dtype: DType::F64,
            ..
        })
    ));
}

#[test]
fn labels_with_tabs_or_newlines_are_refused() {
    let m = invalid(check(
        Format::TensorBoard,
        Embedding::new(matrix(2, 2)).with_labels(vec!["a".into(), "b\tc".into()]),
    ));
    assert_eq!(m, "label 1 holds a tab or a line break");
}

#[test]
fn mindinsight_refuses_embeddings_naming_the_format() {
    let err = check(Format::MindInsight, Embedding::new(matrix(2, 2))).unwrap_err();
    assert_eq!(
        err,
        PackErrorKind::Unsupported {
            format: Format::MindInsight,
            kind: "embedding"
        }
    );
    assert_eq!(err.to_string(), "MindInsight cannot hold embedding values");
}
