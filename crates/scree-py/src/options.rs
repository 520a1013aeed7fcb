//! Python keyword arguments → the engine's [`Options`] and [`KeyspaceOptions`]. Names are the
//! engine's field names; a layout's own options are given flat (`pile_size=4` for `trie`).
//! Types are checked here (`TypeError` for a wrong type or an unknown name); values are left to
//! the engine's own validation, whose `InvalidArgumentError` names the rule broken.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

use scree::fs::FileSystem;
use scree::{Device, KeyspaceOptions, Layout, LevelPlan, Options, WalRecovery};

use crate::errors::{to_py, Fail};

/// A value of one option, converted with the option's name in any message.
trait OptValue: Sized {
    /// What the option takes, for messages.
    const WHAT: &'static str;
    fn from_py(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Self>;
}

fn wrong_type(v: &Bound<'_, PyAny>, name: &str, what: &str) -> PyErr {
    let ty = v
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string());
    PyTypeError::new_err(format!("option {name} takes {what}, not {ty}"))
}

macro_rules! int_opt {
    ($($t:ty),*) => {$(
        impl OptValue for $t {
            const WHAT: &'static str = "an int";
            fn from_py(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Self> {
                // bool is an int subclass in Python: `write_buffer_bytes=True` is a mistake.
                if !v.is_instance_of::<PyInt>() || v.is_instance_of::<PyBool>() {
                    return Err(wrong_type(v, name, Self::WHAT));
                }
                v.extract::<$t>().map_err(|_| {
                    to_py(
                        v.py(),
                        Fail::Invalid(format!(
                            "option {name} must be within {}..={}, got {v}",
                            <$t>::MIN,
                            <$t>::MAX
                        )),
                    )
                })
            }
        }
    )*};
}
int_opt!(usize, u64, u32);

impl OptValue for bool {
    const WHAT: &'static str = "a bool";
    fn from_py(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Self> {
        if !v.is_instance_of::<PyBool>() {
            return Err(wrong_type(v, name, Self::WHAT));
        }
        v.extract::<bool>()
    }
}

impl OptValue for f64 {
    const WHAT: &'static str = "a float";
    fn from_py(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Self> {
        if !(v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>())
            || v.is_instance_of::<PyBool>()
        {
            return Err(wrong_type(v, name, Self::WHAT));
        }
        v.extract::<f64>()
    }
}

impl OptValue for WalRecovery {
    const WHAT: &'static str = "\"tolerate_torn_tail\" or \"point_in_time\"";
    fn from_py(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Self> {
        if !v.is_instance_of::<PyString>() {
            return Err(wrong_type(v, name, Self::WHAT));
        }
        match v.extract::<String>()?.as_str() {
            "tolerate_torn_tail" => Ok(WalRecovery::TolerateTornTail),
            "point_in_time" => Ok(WalRecovery::PointInTime),
            other => Err(to_py(
                v.py(),
                Fail::Invalid(format!(
                    "option {name} must be {}, got {other:?}",
                    Self::WHAT
                )),
            )),
        }
    }
}

/// `semisorted`'s `plan`: a list of SlimDB Table 1 rows (0..=7), level 0 first.
impl OptValue for Vec<LevelPlan> {
    const WHAT: &'static str = "a list of Table 1 rows (ints 0..=7)";
    fn from_py(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Self> {
        let rows: Vec<u8> = v.extract().map_err(|_| wrong_type(v, name, Self::WHAT))?;
        rows.into_iter()
            .map(|r| {
                LevelPlan::from_row(r).ok_or_else(|| {
                    to_py(
                        v.py(),
                        Fail::Invalid(format!(
                            "option {name}: no Table 1 row {r} (rows are 0..=7)"
                        )),
                    )
                })
            })
            .collect()
    }
}

/// Sets `$target.$field` from `(name, value)` when `name` is one of the listed fields;
/// evaluates to whether it was.
macro_rules! set_fields {
    ($name:expr, $value:expr, $target:expr, [$($field:ident),* $(,)?]) => {
        match $name {
            $(stringify!($field) => {
                $target.$field = OptValue::from_py($value, $name)?;
                true
            })*
            _ => false,
        }
    };
}

/// Names of the database options, for messages.
const DB_OPTIONS: &str = "block_cache_bytes, max_open_files, cache_index_and_filter_blocks, \
    background_threads, flush_threads, flush_in_compactions, direct_reads, mmap_reads, \
    max_manifest_bytes, max_immutable_memtables, wal_recovery, create_if_missing, read_only, \
    parallel_search, device, band_mb";

/// The device names `device=` takes (the `scree bench --device` names).
const DEVICES: &str = "\"files\", \"smr-host\" or \"smr-drive\"";

/// The engine's [`Device`] of `device=` and `band_mb=` (band size in MiB, default the
/// emulator's 40); the band size is the engine's to check (`Options::device`).
fn device(
    py: Python<'_>,
    name: Option<&Bound<'_, PyAny>>,
    band_mb: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Device>> {
    let band_needs_smr = || {
        to_py(
            py,
            Fail::Invalid(
                "option band_mb is the band size of an SMR device: it needs \
                 device=\"smr-host\" or device=\"smr-drive\""
                    .into(),
            ),
        )
    };
    let Some(name) = name else {
        return match band_mb {
            None => Ok(None),
            Some(_) => Err(band_needs_smr()),
        };
    };
    if !name.is_instance_of::<PyString>() {
        return Err(wrong_type(name, "device", DEVICES));
    }
    let mb = match band_mb {
        Some(v) => <u64 as OptValue>::from_py(v, "band_mb")?,
        None => scree::fs::band::DEFAULT_BAND_BYTES >> 20,
    };
    match name.extract::<String>()?.as_str() {
        "files" if band_mb.is_some() => Err(band_needs_smr()),
        "files" => Ok(Some(Device::Files)),
        "smr-host" => Ok(Some(Device::SmrHost { band_mb: mb })),
        "smr-drive" => Ok(Some(Device::SmrDrive { band_mb: mb })),
        other => Err(to_py(
            py,
            Fail::Invalid(format!("option device must be {DEVICES}, got {other:?}")),
        )),
    }
}

/// An emulated SMR device of this process and the database directory it was made for.
struct Emulator {
    dir: PathBuf,
    device: Device,
    fs: Option<Arc<dyn FileSystem>>,
}

/// The emulated devices made by `scree.open(..., device=...)`. The emulator keeps the placement
/// of a database's tables in memory (docs/smr.md), so the database reopens only through the
/// same emulator: a later open of the directory with the same device gets it back. An entry
/// goes when its directory is gone (checked at each open on a device).
static EMULATORS: Mutex<Vec<Emulator>> = Mutex::new(Vec::new());

/// Whether `dir` holds a database (its `CURRENT` file).
fn holds_db(dir: &Path) -> bool {
    dir.join("CURRENT").exists()
}

/// `o` on `device` for the database at `path`: the emulator of an earlier open of it in this
/// process, or a new one for a new database. A database this process has on an emulator, opened
/// without it, is refused, as is an existing database opened on a new emulator (its tables
/// would be missing from it).
fn on_device(path: &Path, device: Option<Device>, o: Options) -> Result<Options, Fail> {
    let dir = std::path::absolute(path)
        .map_err(|e| Fail::Invalid(format!("database path {}: {e}", path.display())))?;
    let mut reg = EMULATORS.lock();
    reg.retain(|e| e.dir.exists());
    let held = reg.iter().find(|e| e.dir == dir && holds_db(&dir));
    match (device, held) {
        (None | Some(Device::Files), None) => Ok(o),
        (None | Some(Device::Files), Some(e)) => Err(Fail::Invalid(format!(
            "the database at {} is on an emulated SMR device ({}): its tables are there, so it \
             opens with that device= and band_mb=",
            dir.display(),
            describe(e.device)
        ))),
        (Some(d), Some(e)) if e.device == d => {
            let mut o = o;
            o.fs = e.fs.clone();
            Ok(o)
        }
        (Some(d), Some(e)) => Err(Fail::Invalid(format!(
            "the database at {} is on an emulated SMR device ({}), not {}: open it with that \
             device= and band_mb=",
            dir.display(),
            describe(e.device),
            describe(d)
        ))),
        (Some(_), None) if holds_db(&dir) => Err(Fail::Unsupported(format!(
            "the database at {} exists, and an emulated SMR device opens only a database it made \
             in this process: the emulator keeps its tables' placement in memory (docs/smr.md)",
            dir.display()
        ))),
        (Some(d), None) => {
            let o = o.device(d)?;
            reg.retain(|e| e.dir != dir);
            reg.push(Emulator {
                dir,
                device: d,
                fs: o.fs.clone(),
            });
            Ok(o)
        }
    }
}

/// `smr-host, 40 MiB bands`, as `scree bench` prints a device.
fn describe(d: Device) -> String {
    match d {
        Device::Files => "files".into(),
        Device::SmrHost { band_mb } => format!("smr-host, {band_mb} MiB bands"),
        Device::SmrDrive { band_mb } => format!("smr-drive, {band_mb} MiB bands"),
    }
}

/// The database options named by `kwargs`, over the engine's defaults, for the database at
/// `path` (`device=` ties it to an emulator: [`on_device`]).
pub(crate) fn db_options(
    py: Python<'_>,
    path: &Path,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Options> {
    let mut o = Options::default();
    let Some(kwargs) = kwargs else {
        return on_device(path, None, o).map_err(|e| to_py(py, e));
    };
    let (mut dev, mut band_mb) = (None, None);
    for (k, v) in kwargs.iter() {
        let name: String = k.extract()?;
        match name.as_str() {
            "device" => {
                dev = Some(v);
                continue;
            }
            "band_mb" => {
                band_mb = Some(v);
                continue;
            }
            _ => {}
        }
        let known = set_fields!(
            name.as_str(),
            &v,
            o,
            [
                block_cache_bytes,
                max_open_files,
                cache_index_and_filter_blocks,
                background_threads,
                flush_threads,
                flush_in_compactions,
                direct_reads,
                mmap_reads,
                max_manifest_bytes,
                max_immutable_memtables,
                wal_recovery,
                create_if_missing,
                read_only,
                parallel_search,
            ]
        );
        if !known {
            return Err(PyTypeError::new_err(format!(
                "unknown database option {name:?} (the options are {DB_OPTIONS})"
            )));
        }
    }
    let d = device(py, dev.as_ref(), band_mb.as_ref())?;
    on_device(path, d, o).map_err(|e| to_py(py, e))
}

/// Sets a layout's own option; whether `name` is one.
fn set_layout_option(o: &mut KeyspaceOptions, name: &str, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(match o.layout {
        Layout::Leveled => set_fields!(
            name,
            v,
            o.leveled,
            [
                l0_compaction_trigger,
                l0_slowdown_trigger,
                l0_stop_trigger,
                level_base_bytes,
                level_size_ratio,
                target_table_bytes,
                max_levels,
            ]
        ),
        Layout::Fragmented => set_fields!(
            name,
            v,
            o.fragmented,
            [
                max_sstables_per_guard,
                l0_compaction_trigger,
                l0_slowdown_trigger,
                l0_stop_trigger,
                max_levels,
                top_level_bits,
                bit_decrement,
                expected_keys,
                level1_guards,
                level_base_bytes,
                level_size_ratio,
                aggressive_ratio,
                rewrite_factor,
                seek_compaction_threshold,
                guard_skew_ratio,
                parallel_seeks,
                parallel_seek_threads,
            ]
        ),
        Layout::Trie => set_fields!(
            name,
            v,
            o.trie,
            [
                pile_size,
                last_level_depth,
                bloom_bits_per_key,
                target_fill,
                bucket_fill_cap,
                filter_memory_bytes,
                cluster_cache_bytes,
                gc_garbage_ratio,
                max_last_level_sublevels,
                gc_sample_columns,
                gc_single_pass_bytes,
                slowdown_sublevels,
                stop_sublevels,
            ]
        ),
        Layout::SemiSorted { .. } => set_fields!(
            name,
            v,
            o.semisorted,
            [
                sub_levels,
                max_levels,
                target_table_bytes,
                slowdown_sublevels,
                stop_sublevels,
                secondary_bits_per_key,
                plan,
            ]
        ),
        Layout::Lightweight => set_fields!(
            name,
            v,
            o.lightweight,
            [
                l0_compaction_trigger,
                l0_slowdown_trigger,
                l0_stop_trigger,
                level_base_bytes,
                level_base_follows_l0,
                level_size_ratio,
                max_levels,
                dtable_max_bytes,
                division_count,
                balance_factor,
                concurrent_jobs,
            ]
        ),
        // A layout added to the engine later: only the common options until listed here.
        _ => false,
    })
}

/// The options of a keyspace of `layout` (a string the engine parses: `"semisorted:8"`)
/// named by `kwargs`, over the layout's defaults. The layout's own options come first, so
/// `bloom_bits_per_key` of a `trie` keyspace is the trie's bucket filters' setting.
pub(crate) fn keyspace_options(
    py: Python<'_>,
    layout: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<KeyspaceOptions> {
    let layout: Layout = layout.parse().map_err(|e| to_py(py, Fail::Engine(e)))?;
    let mut o = KeyspaceOptions::new(layout);
    let Some(kwargs) = kwargs else {
        return Ok(o);
    };
    for (k, v) in kwargs.iter() {
        let name: String = k.extract()?;
        if set_layout_option(&mut o, &name, &v)? {
            continue;
        }
        let known = set_fields!(
            name.as_str(),
            &v,
            o,
            [write_buffer_bytes, bloom_bits_per_key, block_size]
        );
        if !known {
            return Err(PyTypeError::new_err(format!(
                "unknown option {name:?} for a keyspace of layout `{layout}` (common options: \
                 write_buffer_bytes, bloom_bits_per_key, block_size; the layout's own are the \
                 fields of its options in the engine's documentation, docs/python.md)"
            )));
        }
    }
    Ok(o)
}
