//! The run's `projector_config.pbtxt`: its `embeddings` entries, each with the files it names
//! checked to be there, as TensorBoard's projector would open them.
//!
//! TensorBoard's projector reads this file, not the event files. Relative paths are relative
//! to the config's directory (the run's), as the projector resolves them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use ember_write::pack::projector_files;

use super::error::ReadError;
use super::pbtxt::{self, Field, FieldValue};

/// One `embeddings` entry of the projector config.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmbeddingEntry {
    /// The projector's name for it (ember writes `<tag>:<step>`, the step in five digits).
    pub tensor_name: String,
    /// The points' TSV file as the config gives it, relative to the run directory unless
    /// absolute; `None` when the config leaves the tensor to a checkpoint.
    pub tensor_path: Option<PathBuf>,
    /// `[N, D]` when the config states it.
    pub tensor_shape: Vec<u32>,
    /// The labels' TSV file, as the config gives it.
    pub metadata_path: Option<PathBuf>,
    /// The thumbnails' sprite.
    pub sprite: Option<SpriteEntry>,
    /// The files above that are missing or cannot be opened; empty when the projector can open
    /// them all.
    pub problems: Vec<EmbeddingProblem>,
}

/// The sprite of an embedding: one image of every point's thumbnail, tiled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpriteEntry {
    /// The PNG file as the config gives it.
    pub image_path: PathBuf,
    /// One thumbnail's `[width, height]`.
    pub single_image_dim: Vec<u32>,
}

/// Which file of an embedding a problem is with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddingFile {
    /// The points (`tensor_path`).
    Tensor,
    /// The labels (`metadata_path`).
    Metadata,
    /// The sprite (`sprite.image_path`).
    Sprite,
}

impl std::fmt::Display for EmbeddingFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EmbeddingFile::Tensor => "tensor",
            EmbeddingFile::Metadata => "metadata",
            EmbeddingFile::Sprite => "sprite",
        })
    }
}

/// A file an embedding names that the projector could not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmbeddingProblem {
    /// Nothing is at the path.
    #[error("its {file} file {} is missing", path.display())]
    Missing {
        /// Which file.
        file: EmbeddingFile,
        /// The path, resolved against the run directory.
        path: PathBuf,
    },
    /// Something other than a file is at the path (a directory, a FIFO).
    #[error("its {file} file {} is not a regular file", path.display())]
    NotAFile {
        /// Which file.
        file: EmbeddingFile,
        /// The path, resolved against the run directory.
        path: PathBuf,
    },
    /// Looking the path up failed otherwise (permissions, a dangling link's loop).
    #[error("its {file} file {} cannot be read: {kind}", path.display())]
    Unreadable {
        /// Which file.
        file: EmbeddingFile,
        /// The path, resolved against the run directory.
        path: PathBuf,
        /// The operating system's error kind.
        kind: io::ErrorKind,
    },
}

/// The entries of `dir/projector_config.pbtxt`, each with its files checked; none without the
/// file. A config that is not a regular file, or not text format, is an error.
pub(super) fn read_config(dir: &Path) -> Result<Vec<EmbeddingEntry>, ReadError> {
    let path = dir.join(projector_files::CONFIG);
    let io_error = |source| ReadError::Io {
        path: path.clone(),
        source,
    };
    // Followed, so that a link to a config reads; checked first, so that a FIFO or device
    // under the name does not block.
    match fs::metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(e)),
        Ok(m) if !m.is_file() => {
            return Err(ReadError::ProjectorConfig {
                path,
                line: 1,
                problem: "the config is not a regular file",
            });
        }
        Ok(_) => {}
    }
    let bytes = fs::read(&path).map_err(io_error)?;
    let config_error = |line, problem| ReadError::ProjectorConfig {
        path: path.clone(),
        line,
        problem,
    };
    let text = String::from_utf8(bytes).map_err(|_| config_error(1, "the config is not UTF-8"))?;
    let fields = pbtxt::parse(&text).map_err(|e| config_error(e.line, e.problem))?;
    let mut entries = Vec::new();
    for field in fields.iter().filter(|f| f.name == "embeddings") {
        let messages = match &field.value {
            FieldValue::List(items) => items.iter().collect(),
            value => vec![value],
        };
        for message in messages {
            let FieldValue::Message(fields) = message else {
                return Err(config_error(field.line, "embeddings is not a message"));
            };
            let mut entry = entry(fields).map_err(|(line, problem)| config_error(line, problem))?;
            entry.problems = check_files(dir, &entry);
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// What went wrong on which line.
type FieldError = (usize, &'static str);

/// An entry from the fields of one `embeddings` message; unknown fields are passed over, as
/// newer configs may hold some.
fn entry(fields: &[Field]) -> Result<EmbeddingEntry, FieldError> {
    let mut entry = EmbeddingEntry::default();
    for field in fields {
        match field.name.as_str() {
            "tensor_name" => entry.tensor_name = string(field)?,
            "tensor_path" => entry.tensor_path = Some(string(field)?.into()),
            "metadata_path" => entry.metadata_path = Some(string(field)?.into()),
            "tensor_shape" => numbers(field, &mut entry.tensor_shape)?,
            "sprite" => {
                let FieldValue::Message(fields) = &field.value else {
                    return Err((field.line, "sprite is not a message"));
                };
                let mut sprite = SpriteEntry::default();
                for field in fields {
                    match field.name.as_str() {
                        "image_path" => sprite.image_path = string(field)?.into(),
                        "single_image_dim" => numbers(field, &mut sprite.single_image_dim)?,
                        _ => {}
                    }
                }
                entry.sprite = Some(sprite);
            }
            _ => {}
        }
    }
    // An empty path is the proto's default: no file.
    entry.tensor_path = entry.tensor_path.filter(|p| !p.as_os_str().is_empty());
    entry.metadata_path = entry.metadata_path.filter(|p| !p.as_os_str().is_empty());
    Ok(entry)
}

fn string(field: &Field) -> Result<String, FieldError> {
    match &field.value {
        FieldValue::String(s) => Ok(s.clone()),
        _ => Err((field.line, "a path or name is not a string")),
    }
}

/// Appends a repeated number field, written as a list or one value per line.
fn numbers<T: std::str::FromStr>(field: &Field, out: &mut Vec<T>) -> Result<(), FieldError> {
    let bad = (field.line, "a size is not a non-negative integer");
    let items = match &field.value {
        FieldValue::List(items) => items.iter().collect(),
        value => vec![value],
    };
    for item in items {
        match item {
            FieldValue::Word(word) => out.push(word.parse().map_err(|_| bad)?),
            _ => return Err(bad),
        }
    }
    Ok(())
}

/// The entry's files that the projector could not open.
fn check_files(dir: &Path, entry: &EmbeddingEntry) -> Vec<EmbeddingProblem> {
    let files = [
        (EmbeddingFile::Tensor, entry.tensor_path.as_deref()),
        (EmbeddingFile::Metadata, entry.metadata_path.as_deref()),
        (
            EmbeddingFile::Sprite,
            entry.sprite.as_ref().map(|s| s.image_path.as_path()),
        ),
    ];
    files
        .into_iter()
        .filter_map(|(file, path)| {
            let path = dir.join(path?);
            match fs::metadata(&path) {
                Ok(m) if m.is_file() => None,
                Ok(_) => Some(EmbeddingProblem::NotAFile { file, path }),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    Some(EmbeddingProblem::Missing { file, path })
                }
                Err(e) => Some(EmbeddingProblem::Unreadable {
                    file,
                    path,
                    kind: e.kind(),
                }),
            }
        })
        .collect()
}
