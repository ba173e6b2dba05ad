//! What tells a log in a bucket which objects ember's writers made there, as the journal does
//! for a local directory: before a writer puts the first object of a file (an event file's
//! first segment, any other file whole), it puts an empty *marker* object,
//! `.ember-run/objects/<the file's name, hex>` (hex, so that no reader takes a marker for an
//! event file by its name). A rollback (a resume, a restart) removes only objects whose
//! file is marked (and that its rank owns by name): another tool's object beside the run's, a
//! copy of one of the run's files under another name, stay as they are. A marker is put before
//! its object, so no object of a writer killed between the two is left unmarked; a marker whose
//! object never came names nothing and is harmless. Markers are never removed: one empty object a
//! file.

use super::download::file_of_segment;

/// The prefix of the markers, below the log's.
pub(crate) const MARKERS: &str = ".ember-run/objects";

/// The file an object is part of, by which it is marked: an event file's segments by the
/// file's name, any other object by its own.
pub(crate) fn marked_file(object: &str) -> String {
    match object.rsplit_once('/') {
        Some((dir, name)) => format!("{dir}/{}", file_of_segment(name)),
        None => file_of_segment(object).to_owned(),
    }
}

/// The marker of the file `object` is part of.
pub(crate) fn marker_of(object: &str) -> String {
    format!("{MARKERS}/{}", marked_file(object))
}

/// The files the markers among `names` mark.
pub(crate) fn marked_files<'a>(
    names: impl Iterator<Item = &'a str>,
) -> std::collections::BTreeSet<String> {
    let prefix = format!("{MARKERS}/");
    names
        .filter_map(|name| name.strip_prefix(&prefix))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_marked_by_their_file_and_other_objects_by_themselves() {
        let tb = "events.out.tfevents.0000000001.h.7.0";
        assert_eq!(
            marker_of(&format!("{tb}.00000003")),
            format!("{MARKERS}/{tb}")
        );
        assert_eq!(
            marker_of(&format!("train/{tb}.00000001")),
            format!("{MARKERS}/train/{tb}")
        );
        assert_eq!(
            marker_of("export_1/w.npy"),
            format!("{MARKERS}/export_1/w.npy")
        );
        assert_eq!(
            marker_of("notes.00000001"),
            format!("{MARKERS}/notes.00000001")
        );
        let names = [format!("{MARKERS}/{tb}"), format!("{tb}.00000001")];
        let marked = marked_files(names.iter().map(String::as_str));
        assert_eq!(marked.into_iter().collect::<Vec<_>>(), [tb]);
    }
}
