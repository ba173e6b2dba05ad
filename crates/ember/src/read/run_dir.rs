//! A run directory read: its summary files, in name order (the order TensorBoard and
//! MindInsight read them), each record decoded by its format's reader, then its projector
//! config; an object-store URL is downloaded first.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use ember_write::pack::proto::{mindspore as msp, tensorboard as tbp};
use ember_write::reader::RecordReader;
use prost::Message;

use super::error::ReadError;
use super::projector;
use super::summaries::Summaries;

/// Which format a file name says a summary file is in, if it is one.
fn summary_format(name: &str) -> Option<bool> {
    if name.contains("tfevents") {
        Some(true)
    } else if name.contains(".out.events.summary.")
        && !name.ends_with("_lineage")
        && !name.ends_with("_explain")
    {
        Some(false)
    } else {
        None
    }
}

impl Summaries {
    /// Reads the summary files directly in `dir` (not in its subdirectories: each is a run of
    /// its own), in name order, and its projector config. `dir` may be an object-store URL
    /// (with the `object-store` feature): its objects are downloaded and read the same way.
    pub fn read_dir(dir: impl AsRef<Path>) -> Result<Summaries, ReadError> {
        let dir = dir.as_ref();
        if let Some(url) = dir.to_str().filter(|d| ember_write::is_remote(d)) {
            // An object-store run: its objects, downloaded whole into a private directory,
            // read as a directory.
            return crate::bucket::read_downloaded(url, |local| Self::read_dir(local));
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ReadError::Io { path, source }
        };
        let mut files = Vec::new();
        for entry in fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_file = fs::metadata(entry.path()).is_ok_and(|m| m.is_file());
            if let (true, Some(tensorboard)) = (is_file, summary_format(&name)) {
                files.push((name, entry.path(), tensorboard));
            }
        }
        files.sort();
        let mut out = Summaries::default();
        for (_, path, tensorboard) in files {
            out.read_file(&path, tensorboard)?;
        }
        out.embeddings = projector::read_config(dir)?;
        Ok(out)
    }

    fn read_file(&mut self, path: &Path, tensorboard: bool) -> Result<(), ReadError> {
        let reader = RecordReader::open(path).map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        // TensorBoard puts a tag's plugin in the metadata of its first value in a file only.
        let mut plugins: HashMap<String, String> = HashMap::new();
        for item in reader {
            let record = match item {
                Ok(record) => record,
                Err(problem) if problem.is_truncated_tail() => break,
                Err(problem) => {
                    return Err(ReadError::Corrupt {
                        path: path.to_path_buf(),
                        problem,
                    });
                }
            };
            let decode = |source| ReadError::Decode {
                path: path.to_path_buf(),
                offset: record.offset,
                source,
            };
            if tensorboard {
                let event = tbp::Event::decode(record.data.as_slice()).map_err(decode)?;
                self.add_tensorboard(event, &mut plugins)
                    .map_err(|(tag, source)| ReadError::Value {
                        path: path.to_path_buf(),
                        offset: record.offset,
                        tag,
                        source: Box::new(source),
                    })?;
            } else {
                let event = msp::Event::decode(record.data.as_slice()).map_err(decode)?;
                self.add_mindinsight(event);
            }
        }
        Ok(())
    }
}
