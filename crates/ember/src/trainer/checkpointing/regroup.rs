//! Optimizer state regrouped by parameter: what a job of some ranks and shards saved, read into
//! a job of others.
//!
//! Burn keys an optimizer record by parameter id, and ids are drawn afresh in every process:
//! each rank's part holds the state of the parameters it stepped, keyed by its own ids, in one
//! record per optimizer shard of that rank. Every entry of a record (a state tensor
//! `"{id}.{field}"` with its `param_id`, a scalar `"{id}.{field}"` such as `"{id}.__rank"`, a
//! path keyed `"{id}"`) names its parameter's id first, and a parameter's place in the model's
//! visit order is the same in every process. So a saved entry is moved by place: from the id
//! the saving rank gave the parameter at that place to the id this process gives it, into the
//! record of the shard here that steps it. An entry of a parameter the saving rank did not step
//! (state it holds but never updates) is left out, as is one of a parameter this rank does not
//! step.

use std::collections::{BTreeMap, HashMap};

use burn::tensor::Bytes;
use burn_pack::{Reader, Scalar, Tensor, Writer};

/// One saved optimizer record to draw from.
pub(super) struct Saved<'a> {
    /// The record, as a checkpoint section holds it.
    pub(super) bytes: &'a [u8],
    /// The id the saving process gave each parameter, in visit order.
    pub(super) ids: &'a [u64],
    /// Whether the saving process stepped the parameter at each place (its state is current).
    pub(super) stepped: &'a [bool],
    /// The file it was read from: records of one file hold disjoint parameters, and a place
    /// an earlier file gave is not taken again from a later one.
    pub(super) file: usize,
}

/// One record for each of `shards` shards, keyed by `ids` (this process's, in visit order),
/// each holding the saved state of the parameters `shard_of` gives it (`None`: not stepped
/// here). A saved entry whose id is none of its record's parameters is an error.
pub(super) fn regroup(
    saved: &[Saved<'_>],
    ids: &[u64],
    shard_of: &dyn Fn(usize) -> Option<usize>,
    shards: usize,
) -> Result<Vec<Bytes>, String> {
    let mut records: Vec<Record> = (0..shards).map(|_| Record::default()).collect();
    let mut given: HashMap<usize, usize> = HashMap::new();
    for source in saved {
        let places: HashMap<u64, usize> = source
            .ids
            .iter()
            .enumerate()
            .map(|(place, id)| (*id, place))
            .collect();
        // Where an entry of the saved id `id` goes: its shard here and its id here.
        let target = |id: u64| -> Result<Option<(usize, u64)>, String> {
            let place = *places
                .get(&id)
                .ok_or_else(|| format!("its optimizer state names parameter id {id}, which none of the model's parameters had"))?;
            let taken_before = given.get(&place).is_some_and(|file| *file != source.file);
            if !source.stepped.get(place).copied().unwrap_or(false) || taken_before {
                return Ok(None);
            }
            Ok(shard_of(place)
                .filter(|shard| *shard < shards)
                .and_then(|shard| Some((shard, *ids.get(place)?))))
        };
        let reader = Reader::from_bytes(Bytes::from_bytes_vec(source.bytes.to_vec()))
            .map_err(|e| e.to_string())?;
        for (key, value) in reader.scalars() {
            let (id, field) = split_id(key)?;
            if let Some((shard, to)) = target(id)? {
                records[shard].scalars.insert(join_id(to, field), *value);
            }
        }
        for (key, value) in reader.metadata() {
            let (id, field) = split_id(key)?;
            if let Some((shard, to)) = target(id)? {
                records[shard]
                    .paths
                    .insert(join_id(to, field), value.clone());
            }
        }
        for tensor in reader.into_tensors().map_err(|e| e.to_string())? {
            let (name, dtype, shape, param_id, bytes) =
                tensor.into_parts().map_err(|e| e.to_string())?;
            let (id, field) = split_id(&name)?;
            if param_id.is_some_and(|param| param != id) {
                return Err(format!(
                    "its optimizer tensor {name:?} is of parameter id {param_id:?}"
                ));
            }
            if let Some((shard, to)) = target(id)? {
                let name = join_id(to, field);
                records[shard]
                    .tensors
                    .push(Tensor::new(name, dtype, shape, Some(to), bytes));
            }
        }
        for (place, stepped) in source.stepped.iter().enumerate() {
            if *stepped {
                given.entry(place).or_insert(source.file);
            }
        }
    }
    records.into_iter().map(Record::into_bytes).collect()
}

/// A record being made: what a burnpack container holds.
#[derive(Default)]
struct Record {
    tensors: Vec<Tensor>,
    scalars: BTreeMap<String, Scalar>,
    paths: BTreeMap<String, String>,
}

impl Record {
    fn into_bytes(self) -> Result<Bytes, String> {
        let mut writer = Writer::new(self.tensors);
        for (key, value) in &self.scalars {
            writer = writer.with_scalar(key, *value);
        }
        for (key, value) in &self.paths {
            writer = writer.with_metadata(key, value);
        }
        writer.into_bytes().map_err(|e| e.to_string())
    }
}

/// A record key's parameter id and the rest: `"7.moment"` is `(7, Some("moment"))`, a path's
/// `"7"` is `(7, None)`.
fn split_id(key: &str) -> Result<(u64, Option<&str>), String> {
    let (id, field) = match key.split_once('.') {
        Some((id, field)) => (id, Some(field)),
        None => (key, None),
    };
    let id = id
        .parse()
        .map_err(|_| format!("its optimizer state holds {key:?}, not keyed by a parameter id"))?;
    Ok((id, field))
}

fn join_id(id: u64, field: Option<&str>) -> String {
    match field {
        Some(field) => format!("{id}.{field}"),
        None => id.to_string(),
    }
}
