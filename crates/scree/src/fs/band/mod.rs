//! The shingled-band (SMR) device emulator: [`BandFs`] is a [`FileSystem`] that places the
//! engine's table files on an emulated device of fixed-size bands with write pointers, passes
//! every other file (WAL, manifest, CURRENT, LOCK, temporaries) through to an inner file system
//! as the device's conventional region, and counts host and device bytes (docs/smr.md).
//!
//! Two modes. **Host-managed**: a table file owns one band; appends land at the band's write
//! pointer, [`FileSystem::reopen_truncated`] moves the pointer back (the tail overwrite of an
//! LWC-tree, free), deleting the file resets the band. **Drive-managed**: a host allocator places
//! file bytes anywhere on the device (first fit, growing a file in place when it can, like a
//! block file system reusing freed blocks) and the drive pays a read-modify-write of the valid
//! bytes after a write in its band whenever the write does not land past the band's valid data.
//!
//! The placement of files (names → bands or extents) is held in memory for the emulator's
//! lifetime: a database on the emulator can be closed and reopened through the same
//! [`BandFs`] (share it through `Options::fs`), not by another process.

mod ranges;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{FileLock, FileSystem, ReadableFile, WritableFile};
use ranges::RangeSet;

/// The name of the device's backing file when it is created beside the first table file
/// ([`Backing::BesideFirstTable`]); hidden from [`FileSystem::list`].
pub const DEVICE_FILE: &str = "SMR-DEVICE";

/// Default band size: 40 MiB (the paper's default).
pub const DEFAULT_BAND_BYTES: u64 = 40 << 20;

/// Default device capacity: 256 GiB of bands (a sparse backing file: only written bytes take
/// space on the host disk).
pub const DEFAULT_DEVICE_BYTES: u64 = 256 << 30;

/// How the device is managed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BandMode {
    /// The host writes bands sequentially itself: one table file per band.
    #[default]
    HostManaged,
    /// The drive hides the bands: any placement, paid for with read-modify-writes.
    DriveManaged,
}

impl BandMode {
    /// The name the CLI uses (`smr-host`, `smr-drive`).
    pub fn name(self) -> &'static str {
        match self {
            BandMode::HostManaged => "smr-host",
            BandMode::DriveManaged => "smr-drive",
        }
    }
}

/// Where the emulated device keeps the bytes of its bands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// In memory (tests; an inner file system whose paths are not real).
    Memory,
    /// In this file of the host's file system (created or truncated when the emulator first
    /// places a table; sparse).
    File(PathBuf),
    /// In the file [`DEVICE_FILE`] of the directory of the first table file created.
    BesideFirstTable,
}

/// The shape of an emulated device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BandConfig {
    /// Host- or drive-managed.
    pub mode: BandMode,
    /// Bytes per band (4 KiB to 1 GiB; the paper uses 20–60 MiB).
    pub band_bytes: u64,
    /// Bands on the device; none free is an out-of-space error.
    pub bands: u64,
    /// Where band bytes are kept.
    pub backing: Backing,
}

impl BandConfig {
    /// A device of `band_bytes` bands, [`DEFAULT_DEVICE_BYTES`] large, backed beside the
    /// first table file.
    pub fn new(mode: BandMode, band_bytes: u64) -> BandConfig {
        BandConfig {
            mode,
            band_bytes,
            bands: (DEFAULT_DEVICE_BYTES / band_bytes.max(1)).max(1),
            backing: Backing::BesideFirstTable,
        }
    }

    fn validate(&self) -> io::Result<()> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if !(4096..=1 << 30).contains(&self.band_bytes) {
            return bad(format!(
                "SMR band size must be 4 KiB to 1 GiB, got {} bytes",
                self.band_bytes
            ));
        }
        if self.bands == 0 || self.bands.checked_mul(self.band_bytes).is_none() {
            return bad(format!("SMR device of {} bands is impossible", self.bands));
        }
        Ok(())
    }
}

/// The emulator's counters since it was created (all databases and opens that used it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// Host- or drive-managed.
    pub mode: BandMode,
    /// Bytes per band.
    pub band_bytes: u64,
    /// Bands on the device.
    pub bands: u64,
    /// Bands holding data: owned by a file (host-managed) or holding a live byte
    /// (drive-managed).
    pub bands_in_use: u64,
    /// Bytes of live table files on the bands.
    pub live_bytes: u64,
    /// Bytes the engine wrote to the device (bands and conventional region).
    pub host_bytes_written: u64,
    /// Bytes the engine read from the device.
    pub host_bytes_read: u64,
    /// Bytes the device wrote: the host's, plus what read-modify-writes rewrote.
    pub device_bytes_written: u64,
    /// Bytes the device read: the host's, plus what read-modify-writes read back.
    pub device_bytes_read: u64,
    /// Of `host_bytes_written`, the conventional region's (WAL, manifest, CURRENT).
    pub conventional_bytes_written: u64,
    /// Of `host_bytes_read`, the conventional region's.
    pub conventional_bytes_read: u64,
    /// Read-modify-writes (drive-managed writes that landed before valid data of their band).
    pub read_modify_writes: u64,
    /// Valid bytes read-modify-writes read and wrote back.
    pub rmw_bytes: u64,
    /// Bands reset for reuse (host-managed: a file deleted).
    pub band_resets: u64,
    /// Files reopened below their end ([`FileSystem::reopen_truncated`] with bytes cut).
    pub truncations: u64,
    /// Auxiliary write amplification: `device_bytes_written / host_bytes_written`.
    pub awa: f64,
    /// Auxiliary read amplification: `device_bytes_read / host_bytes_read`.
    pub ara: f64,
}

impl DeviceStats {
    /// Multiplicative write amplification: device bytes written per user byte (the engine's
    /// `user_bytes`, Σ key+value of puts and keys of deletes).
    pub fn mwa(&self, user_bytes: u64) -> f64 {
        ratio(self.device_bytes_written, user_bytes)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Whether `path` is a table file, placed on bands (its extension is a table format's).
fn on_bands(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(crate::table_format::is_table_ext)
}

/// The bytes of the bands.
enum Store {
    /// Band number → its bytes from offset 0 up to the highest byte written.
    Memory(HashMap<u64, Vec<u8>>),
    /// Shared so that reads and syncs run outside the state lock.
    File(Arc<File>),
}

impl Store {
    fn write(&mut self, band_bytes: u64, lba: u64, data: &[u8]) -> io::Result<()> {
        match self {
            Store::File(f) => f.write_all_at(data, lba),
            Store::Memory(bands) => {
                for (band, off, range) in band_pieces(band_bytes, lba, data.len()) {
                    let buf = bands.entry(band).or_default();
                    let end = off + range.len();
                    if buf.len() < end {
                        buf.resize(end, 0);
                    }
                    let (Some(dst), Some(src)) = (buf.get_mut(off..end), data.get(range)) else {
                        return Err(io::Error::other("band buffer"));
                    };
                    dst.copy_from_slice(src);
                }
                Ok(())
            }
        }
    }

    fn read(&self, band_bytes: u64, lba: u64, buf: &mut [u8]) -> io::Result<()> {
        match self {
            Store::File(f) => f.read_exact_at(buf, lba),
            Store::Memory(bands) => {
                for (band, off, range) in band_pieces(band_bytes, lba, buf.len()) {
                    let end = off + range.len();
                    let src = bands.get(&band).and_then(|b| b.get(off..end));
                    let (Some(src), Some(dst)) = (src, buf.get_mut(range)) else {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "band bytes never written",
                        ));
                    };
                    dst.copy_from_slice(src);
                }
                Ok(())
            }
        }
    }

    /// The backing file, for reads and syncs outside the state lock (`None` in memory).
    fn file(&self) -> Option<Arc<File>> {
        match self {
            Store::File(f) => Some(f.clone()),
            Store::Memory(_) => None,
        }
    }
}

/// `len` bytes at device address `lba` cut at band boundaries: (band, offset in the band,
/// range of the bytes).
fn band_pieces(band_bytes: u64, lba: u64, len: usize) -> Vec<(u64, usize, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut done = 0usize;
    while done < len {
        let at = lba + done as u64;
        let off = at % band_bytes;
        let n = ((band_bytes - off) as usize).min(len - done);
        out.push((at / band_bytes, off as usize, done..done + n));
        done += n;
    }
    out
}

/// A table file on the device.
struct FileMeta {
    /// Its name (while linked).
    path: PathBuf,
    /// Bytes written to the device (a writer's buffered bytes are not yet).
    len: u64,
    /// Device addresses of its bytes in file order: (start, length). Host-managed: one
    /// extent at its band's start.
    extents: Vec<(u64, u64)>,
    /// Its band (host-managed).
    band: Option<u64>,
    /// Open readers and writers: a removed file keeps its bytes until the last closes, as on
    /// a POSIX file system.
    refs: usize,
    /// Whether a name points at it.
    linked: bool,
}

#[derive(Default)]
struct Counters {
    host_written: u64,
    host_read: u64,
    device_written: u64,
    device_read: u64,
    conv_written: u64,
    conv_read: u64,
    rmws: u64,
    rmw_bytes: u64,
    band_resets: u64,
    truncations: u64,
}

struct State {
    store: Option<Store>,
    /// What errors call the device: its backing file, or "in-memory".
    device_name: String,
    files: HashMap<u64, FileMeta>,
    names: HashMap<PathBuf, u64>,
    next_id: u64,
    /// Host-managed: bands released by deleted files, reused lowest first.
    free_bands: BTreeSet<u64>,
    /// Host-managed: bands never used are `fresh_band..bands`.
    fresh_band: u64,
    /// Drive-managed: device bytes no file holds.
    free: RangeSet,
    /// Drive-managed: device bytes files hold (valid data).
    used: RangeSet,
    c: Counters,
}

struct Shared {
    cfg: BandConfig,
    state: Mutex<State>,
}

/// The emulated shingled device (see the module comment and docs/smr.md).
pub struct BandFs {
    inner: Arc<dyn FileSystem>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BandFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BandFs")
            .field("cfg", &self.shared.cfg)
            .finish()
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file on the SMR device", path.display()),
    )
}

impl BandFs {
    /// An empty device of shape `cfg` whose conventional region is `inner`.
    pub fn new(inner: Arc<dyn FileSystem>, cfg: BandConfig) -> io::Result<BandFs> {
        cfg.validate()?;
        let mut free = RangeSet::default();
        free.insert(0, cfg.bands * cfg.band_bytes);
        let (store, device_name) = match &cfg.backing {
            Backing::Memory => (
                Some(Store::Memory(HashMap::new())),
                "in-memory SMR device".to_string(),
            ),
            Backing::File(p) => (None, p.display().to_string()),
            Backing::BesideFirstTable => (None, String::new()),
        };
        let state = State {
            store,
            device_name,
            files: HashMap::new(),
            names: HashMap::new(),
            next_id: 1,
            free_bands: BTreeSet::new(),
            fresh_band: 0,
            free,
            used: RangeSet::default(),
            c: Counters::default(),
        };
        Ok(BandFs {
            inner,
            shared: Arc::new(Shared {
                cfg,
                state: Mutex::new(state),
            }),
        })
    }

    /// The device's shape.
    pub fn config(&self) -> &BandConfig {
        &self.shared.cfg
    }

    /// The counters so far.
    pub fn stats(&self) -> DeviceStats {
        let cfg = &self.shared.cfg;
        let st = self.shared.state.lock();
        let (bands_in_use, live_bytes) = match cfg.mode {
            BandMode::HostManaged => {
                let live = st
                    .files
                    .values()
                    .filter(|f| f.band.is_some())
                    .map(|f| f.len)
                    .sum();
                (st.fresh_band - st.free_bands.len() as u64, live)
            }
            BandMode::DriveManaged => {
                // Distinct bands the valid ranges touch (ranges are sorted and disjoint).
                let mut n = 0;
                let mut last: Option<u64> = None;
                for (start, len) in st.used.iter() {
                    let first = start / cfg.band_bytes;
                    let end = (start + len - 1) / cfg.band_bytes;
                    let from = match last {
                        Some(l) if l >= first => l + 1,
                        _ => first,
                    };
                    if end >= from {
                        n += end - from + 1;
                    }
                    last = Some(end);
                }
                (n, st.used.total())
            }
        };
        let c = &st.c;
        DeviceStats {
            mode: cfg.mode,
            band_bytes: cfg.band_bytes,
            bands: cfg.bands,
            bands_in_use,
            live_bytes,
            host_bytes_written: c.host_written,
            host_bytes_read: c.host_read,
            device_bytes_written: c.device_written,
            device_bytes_read: c.device_read,
            conventional_bytes_written: c.conv_written,
            conventional_bytes_read: c.conv_read,
            read_modify_writes: c.rmws,
            rmw_bytes: c.rmw_bytes,
            band_resets: c.band_resets,
            truncations: c.truncations,
            awa: ratio(c.device_written, c.host_written),
            ara: ratio(c.device_read, c.host_read),
        }
    }

    /// Opens the backing store if this is the first table file.
    fn ensure_store(&self, st: &mut State, path: &Path) -> io::Result<()> {
        if st.store.is_some() {
            return Ok(());
        }
        let file = match &self.shared.cfg.backing {
            Backing::Memory => {
                st.store = Some(Store::Memory(HashMap::new()));
                return Ok(());
            }
            Backing::File(p) => p.clone(),
            Backing::BesideFirstTable => path
                .parent()
                .unwrap_or_else(|| Path::new("."))
                .join(DEVICE_FILE),
        };
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&file)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("SMR device {}: cannot open: {e}", file.display()),
                )
            })?;
        st.device_name = file.display().to_string();
        st.store = Some(Store::File(Arc::new(f)));
        Ok(())
    }

    /// A new, linked, empty table file at `path` (an old one of that name is unlinked).
    fn create_band_file(&self, path: &Path) -> io::Result<BandWriter> {
        let mut st = self.shared.state.lock();
        self.ensure_store(&mut st, path)?;
        if let Some(old) = st.names.remove(path) {
            unlink(&mut st, &self.shared.cfg, old);
        }
        let band = match self.shared.cfg.mode {
            BandMode::HostManaged => Some(take_band(&mut st, &self.shared.cfg)?),
            BandMode::DriveManaged => None,
        };
        let id = st.next_id;
        st.next_id += 1;
        let extents = band
            .map(|b| vec![(b * self.shared.cfg.band_bytes, 0)])
            .unwrap_or_default();
        st.files.insert(
            id,
            FileMeta {
                path: path.to_path_buf(),
                len: 0,
                extents,
                band,
                refs: 1,
                linked: true,
            },
        );
        st.names.insert(path.to_path_buf(), id);
        Ok(BandWriter::new(self.shared.clone(), id, 0))
    }

    /// A writer of the existing table file `path` from byte `at` on (its end, or below it).
    fn reopen_band_file(&self, path: &Path, at: Option<u64>) -> io::Result<BandWriter> {
        let cfg = &self.shared.cfg;
        let mut st = self.shared.state.lock();
        let id = *st.names.get(path).ok_or_else(|| not_found(path))?;
        let len = st.files.get(&id).map_or(0, |f| f.len);
        let at = at.unwrap_or(len);
        if at > len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: cannot write from byte {at}, past the file's end ({len} bytes)",
                    path.display()
                ),
            ));
        }
        if at < len {
            truncate(&mut st, cfg, id, at);
            st.c.truncations += 1;
        }
        if let Some(f) = st.files.get_mut(&id) {
            f.refs += 1;
        }
        Ok(BandWriter::new(self.shared.clone(), id, at))
    }

    fn conv_writer(&self, inner: Box<dyn WritableFile>) -> Box<dyn WritableFile> {
        Box::new(ConvWriter {
            inner,
            shared: self.shared.clone(),
        })
    }
}

/// Takes the lowest free band (host-managed).
fn take_band(st: &mut State, cfg: &BandConfig) -> io::Result<u64> {
    if let Some(b) = st.free_bands.pop_first() {
        return Ok(b);
    }
    if st.fresh_band < cfg.bands {
        st.fresh_band += 1;
        return Ok(st.fresh_band - 1);
    }
    Err(io::Error::new(
        io::ErrorKind::StorageFull,
        format!(
            "SMR device {}: no free band (all {} bands of {} bytes hold a file)",
            st.device_name, cfg.bands, cfg.band_bytes
        ),
    ))
}

/// Drops a name's file: its space is released now, or when its last reader or writer closes.
fn unlink(st: &mut State, cfg: &BandConfig, id: u64) {
    let release = match st.files.get_mut(&id) {
        Some(f) => {
            f.linked = false;
            f.refs == 0
        }
        None => false,
    };
    if release {
        release_file(st, cfg, id);
    }
}

/// Returns a file's band or extents to the free space and forgets it.
fn release_file(st: &mut State, cfg: &BandConfig, id: u64) {
    truncate(st, cfg, id, 0);
    if let Some(f) = st.files.remove(&id) {
        if let Some(b) = f.band {
            st.free_bands.insert(b);
            st.c.band_resets += 1;
        }
    }
}

/// Cuts a file to `len` bytes. Host-managed: the band's write pointer moves back (free).
/// Drive-managed: the device bytes past `len` are released (trimmed).
fn truncate(st: &mut State, cfg: &BandConfig, id: u64, len: u64) {
    let Some(f) = st.files.get_mut(&id) else {
        return;
    };
    if let Some(b) = f.band {
        f.len = len;
        f.extents = vec![(b * cfg.band_bytes, len)];
        return;
    }
    let mut released = Vec::new();
    let mut keep = f.len.min(len);
    let mut kept = Vec::new();
    for &(s, l) in &f.extents {
        let k = keep.min(l);
        if k > 0 {
            kept.push((s, k));
        }
        if l > k {
            released.push((s + k, l - k));
        }
        keep -= k;
    }
    f.extents = kept;
    f.len = f.len.min(len);
    for (s, l) in released {
        st.used.remove(s, l);
        st.free.insert(s, l);
    }
}

/// The device addresses of file bytes `[off, off + len)` of `extents`.
fn locate(extents: &[(u64, u64)], mut off: u64, mut len: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(s, l) in extents {
        if len == 0 {
            break;
        }
        if off >= l {
            off -= l;
            continue;
        }
        let take = (l - off).min(len);
        out.push((s + off, take));
        len -= take;
        off = 0;
    }
    out
}

/// What writing one buffer cost the device.
#[derive(Default)]
struct Cost {
    device_written: u64,
    device_read: u64,
    rmws: u64,
    rmw_bytes: u64,
}

/// Drive-managed: allocates `n` bytes for the end of file `id` (growing its last extent in
/// place when the bytes after it are free, else first fit) and returns where they go and
/// what writing them costs: a piece that lands before valid bytes of its band pays a
/// read-modify-write of those bytes.
fn allocate(
    st: &mut State,
    cfg: &BandConfig,
    id: u64,
    n: u64,
) -> io::Result<(Vec<(u64, u64)>, Cost)> {
    if st.free.total() < n {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "SMR device {}: out of space ({} bytes free, {n} needed; {} bands of {} bytes)",
                st.device_name,
                st.free.total(),
                cfg.bands,
                cfg.band_bytes
            ),
        ));
    }
    let mut goal = st
        .files
        .get(&id)
        .and_then(|f| f.extents.last())
        .map(|&(s, l)| s + l);
    let mut pieces = Vec::new();
    let mut cost = Cost::default();
    let mut need = n;
    while need > 0 {
        let Some((s, avail)) = goal
            .and_then(|g| st.free.starting_at(g).map(|l| (g, l)))
            .or_else(|| st.free.lowest())
        else {
            break;
        };
        let take = avail.min(need);
        st.free.remove(s, take);
        // Cost it band by band, before it joins the valid data.
        let mut p = s;
        while p < s + take {
            let band_end = (p / cfg.band_bytes + 1) * cfg.band_bytes;
            let end = band_end.min(s + take);
            let valid_after = st.used.overlap(end, band_end);
            cost.device_written += end - p + valid_after;
            if valid_after > 0 {
                cost.device_read += valid_after;
                cost.rmws += 1;
                cost.rmw_bytes += valid_after;
            }
            p = end;
        }
        st.used.insert(s, take);
        pieces.push((s, take));
        goal = Some(s + take);
        need -= take;
    }
    Ok((pieces, cost))
}

/// Writes `data` at the end of file `id` (which holds `at` bytes) and counts it.
fn write_file(shared: &Shared, id: u64, at: u64, data: &[u8]) -> io::Result<()> {
    let cfg = &shared.cfg;
    let mut st = shared.state.lock();
    let n = data.len() as u64;
    let (meta_len, band, path) = match st.files.get(&id) {
        Some(f) => (f.len, f.band, f.path.clone()),
        None => {
            return Err(io::Error::other(
                "SMR device: file vanished under its writer",
            ))
        }
    };
    if meta_len != at {
        return Err(io::Error::other(format!(
            "{}: file is {meta_len} bytes on the SMR device, its writer expected {at}",
            path.display()
        )));
    }
    let (pieces, cost) = match band {
        Some(b) => {
            if at + n > cfg.band_bytes {
                return Err(too_big(&st.device_name, cfg, &path, at + n));
            }
            // At the write pointer: sequential, no extra cost.
            (
                vec![(b * cfg.band_bytes + at, n)],
                Cost {
                    device_written: n,
                    ..Cost::default()
                },
            )
        }
        None => allocate(&mut st, cfg, id, n)?,
    };
    let mut res = Ok(());
    let mut off = 0usize;
    if let Some(store) = st.store.as_mut() {
        for &(s, l) in &pieces {
            let l = l as usize;
            let chunk = data.get(off..off + l).unwrap_or_default();
            if let Err(e) = store.write(cfg.band_bytes, s, chunk) {
                res = Err(e);
                break;
            }
            off += l;
        }
    } else {
        res = Err(io::Error::other("SMR device has no backing store"));
    }
    if let Some(f) = st.files.get_mut(&id) {
        f.len = at + n;
        if f.band.is_some() {
            f.extents = vec![(b_start(f.band, cfg), at + n)];
        } else {
            for (s, l) in pieces {
                match f.extents.last_mut() {
                    Some((ls, ll)) if *ls + *ll == s => *ll += l,
                    _ => f.extents.push((s, l)),
                }
            }
        }
    }
    if let Err(e) = res {
        // Give back what was placed: the write did not happen.
        truncate(&mut st, cfg, id, at);
        return Err(io::Error::new(
            e.kind(),
            format!("SMR device {}: write failed: {e}", st.device_name),
        ));
    }
    st.c.host_written += n;
    st.c.device_written += cost.device_written;
    st.c.device_read += cost.device_read;
    st.c.rmws += cost.rmws;
    st.c.rmw_bytes += cost.rmw_bytes;
    Ok(())
}

fn b_start(band: Option<u64>, cfg: &BandConfig) -> u64 {
    band.unwrap_or(0) * cfg.band_bytes
}

fn too_big(device: &str, cfg: &BandConfig, path: &Path, len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!(
            "{}: would grow to {len} bytes, past its band of {} bytes on host-managed SMR \
             device {device} (one table file per band; use smaller tables or larger bands)",
            path.display(),
            cfg.band_bytes
        ),
    )
}

/// Makes the band bytes durable: `fdatasync` of the backing file, outside the state lock.
fn sync_store(shared: &Shared) -> io::Result<()> {
    let file = shared.state.lock().store.as_ref().and_then(Store::file);
    file.map_or(Ok(()), |f| f.sync_data())
}

/// Closes one reader or writer of file `id`, releasing it if it was removed.
fn close(shared: &Shared, id: u64) {
    let mut st = shared.state.lock();
    let release = match st.files.get_mut(&id) {
        Some(f) => {
            f.refs = f.refs.saturating_sub(1);
            f.refs == 0 && !f.linked
        }
        None => false,
    };
    if release {
        release_file(&mut st, &shared.cfg, id);
    }
}

/// A writer of a table file on the bands. Appends gather in memory and reach the device as
/// one write at `flush`, `sync`, `finish`, drop, or when a band's worth has gathered (like a
/// page cache written back at fsync: the drive sees one write per table, not one per block).
/// A failed write drops the gathered bytes and poisons the writer, as `StdFs`'s does.
struct BandWriter {
    shared: Arc<Shared>,
    id: u64,
    /// Bytes on the device.
    written: u64,
    buf: Vec<u8>,
    failed: Option<io::ErrorKind>,
}

impl BandWriter {
    fn new(shared: Arc<Shared>, id: u64, written: u64) -> BandWriter {
        BandWriter {
            shared,
            id,
            written,
            buf: Vec::new(),
            failed: None,
        }
    }

    fn check(&self) -> io::Result<()> {
        match self.failed {
            None => Ok(()),
            Some(kind) => Err(io::Error::new(
                kind,
                "an earlier write to this file failed; its bytes were dropped",
            )),
        }
    }

    fn push(&mut self) -> io::Result<()> {
        self.check()?;
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.buf);
        match write_file(&self.shared, self.id, self.written, &data) {
            Ok(()) => {
                self.written += data.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.failed = Some(e.kind());
                Err(e)
            }
        }
    }
}

impl WritableFile for BandWriter {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.check()?;
        let cfg = &self.shared.cfg;
        let end = self.len() + data.len() as u64;
        if cfg.mode == BandMode::HostManaged && end > cfg.band_bytes {
            let st = self.shared.state.lock();
            let path = st
                .files
                .get(&self.id)
                .map(|f| f.path.clone())
                .unwrap_or_default();
            return Err(too_big(&st.device_name, cfg, &path, end));
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() as u64 >= cfg.band_bytes {
            self.push()?;
        }
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.push()
    }
    fn sync(&mut self) -> io::Result<()> {
        self.push()?;
        sync_store(&self.shared)
    }
    fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }
}

impl Drop for BandWriter {
    fn drop(&mut self) {
        // Like a closed file: gathered bytes reach the device (an error here has no caller).
        if self.failed.is_none() {
            let _ = self.push();
        }
        close(&self.shared, self.id);
    }
}

/// A reader of a table file on the bands.
struct BandReader {
    shared: Arc<Shared>,
    id: u64,
}

impl ReadableFile for BandReader {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.read_into(offset, &mut buf)?;
        Ok(buf)
    }
    fn read_into(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let cfg = &self.shared.cfg;
        let st = self.shared.state.lock();
        let n = buf.len() as u64;
        let f = st
            .files
            .get(&self.id)
            .ok_or_else(|| io::Error::other("SMR device: file vanished under its reader"))?;
        if offset.checked_add(n).is_none_or(|e| e > f.len) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: read of {n} bytes at {offset} past its end ({} bytes)",
                    f.path.display(),
                    f.len
                ),
            ));
        }
        let pieces = locate(&f.extents, offset, n);
        match st.store.as_ref().and_then(Store::file) {
            // A backing file is read outside the lock: this reader's reference keeps the
            // file's extents from going to another file (they are released at its last close).
            Some(file) => {
                drop(st);
                read_pieces(buf, &pieces, |dst, lba| file.read_exact_at(dst, lba))?;
            }
            None => {
                let store = st
                    .store
                    .as_ref()
                    .ok_or_else(|| io::Error::other("SMR device has no backing store"))?;
                read_pieces(buf, &pieces, |dst, lba| {
                    store.read(cfg.band_bytes, lba, dst)
                })?;
                drop(st);
            }
        }
        let mut st = self.shared.state.lock();
        st.c.host_read += n;
        st.c.device_read += n;
        Ok(())
    }
    fn len(&self) -> u64 {
        let st = self.shared.state.lock();
        st.files.get(&self.id).map_or(0, |f| f.len)
    }
}

/// Fills `buf` from the device addresses `pieces` (in file order) with `read`.
fn read_pieces(
    buf: &mut [u8],
    pieces: &[(u64, u64)],
    read: impl Fn(&mut [u8], u64) -> io::Result<()>,
) -> io::Result<()> {
    let mut at = 0usize;
    for &(lba, len) in pieces {
        let len = len as usize;
        let dst = buf
            .get_mut(at..at + len)
            .ok_or_else(|| io::Error::other("SMR device: extent map longer than file"))?;
        read(dst, lba)?;
        at += len;
    }
    Ok(())
}

impl Drop for BandReader {
    fn drop(&mut self) {
        close(&self.shared, self.id);
    }
}

/// A conventional-region file being written: passed through, bytes counted (AWA 1).
struct ConvWriter {
    inner: Box<dyn WritableFile>,
    shared: Arc<Shared>,
}

impl WritableFile for ConvWriter {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let before = self.inner.len();
        let res = self.inner.append(data);
        let n = self.inner.len().saturating_sub(before);
        let mut st = self.shared.state.lock();
        st.c.conv_written += n;
        st.c.host_written += n;
        st.c.device_written += n;
        res
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync()
    }
    fn finish(&mut self) -> io::Result<()> {
        self.inner.finish()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn mapped(&self) -> bool {
        self.inner.mapped()
    }
}

/// A conventional-region file being read: passed through, bytes counted.
struct ConvReader {
    inner: Arc<dyn ReadableFile>,
    shared: Arc<Shared>,
}

impl ConvReader {
    fn count(&self, n: usize) {
        let mut st = self.shared.state.lock();
        st.c.conv_read += n as u64;
        st.c.host_read += n as u64;
        st.c.device_read += n as u64;
    }
}

impl ReadableFile for ConvReader {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let data = self.inner.read_at(offset, len)?;
        self.count(data.len());
        Ok(data)
    }
    fn read_into(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_into(offset, buf)?;
        self.count(buf.len());
        Ok(())
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

fn mixed_rename(from: &Path, to: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{} -> {}: cannot rename between the SMR device's bands and its conventional region",
            from.display(),
            to.display()
        ),
    )
}

impl FileSystem for BandFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        if on_bands(path) {
            return Ok(Box::new(self.create_band_file(path)?));
        }
        Ok(self.conv_writer(self.inner.create(path)?))
    }
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        if on_bands(path) {
            return self.create(path);
        }
        Ok(self.conv_writer(self.inner.create_log(path)?))
    }
    fn reopen_for_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        if on_bands(path) {
            return Ok(Box::new(self.reopen_band_file(path, None)?));
        }
        Ok(self.conv_writer(self.inner.reopen_for_append(path)?))
    }
    fn reopen_truncated(&self, path: &Path, len: u64) -> io::Result<Box<dyn WritableFile>> {
        if on_bands(path) {
            return Ok(Box::new(self.reopen_band_file(path, Some(len))?));
        }
        Ok(self.conv_writer(self.inner.reopen_truncated(path, len)?))
    }
    fn open(&self, path: &Path, direct: bool) -> io::Result<Arc<dyn ReadableFile>> {
        if !on_bands(path) {
            return Ok(Arc::new(ConvReader {
                inner: self.inner.open(path, direct)?,
                shared: self.shared.clone(),
            }));
        }
        let mut st = self.shared.state.lock();
        let id = *st.names.get(path).ok_or_else(|| not_found(path))?;
        if let Some(f) = st.files.get_mut(&id) {
            f.refs += 1;
        }
        Ok(Arc::new(BandReader {
            shared: self.shared.clone(),
            id,
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match (on_bands(from), on_bands(to)) {
            (false, false) => self.inner.rename(from, to),
            (true, true) => {
                let mut st = self.shared.state.lock();
                let id = st.names.remove(from).ok_or_else(|| not_found(from))?;
                if let Some(old) = st.names.remove(to) {
                    unlink(&mut st, &self.shared.cfg, old);
                }
                if let Some(f) = st.files.get_mut(&id) {
                    f.path = to.to_path_buf();
                }
                st.names.insert(to.to_path_buf(), id);
                Ok(())
            }
            _ => Err(mixed_rename(from, to)),
        }
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        if !on_bands(path) {
            return self.inner.remove(path);
        }
        let mut st = self.shared.state.lock();
        let id = st.names.remove(path).ok_or_else(|| not_found(path))?;
        unlink(&mut st, &self.shared.cfg, id);
        Ok(())
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out: Vec<String> = self
            .inner
            .list(dir)?
            .into_iter()
            .filter(|n| n != DEVICE_FILE && !on_bands(Path::new(n)))
            .collect();
        let st = self.shared.state.lock();
        for p in st.names.keys() {
            if p.parent() == Some(dir) {
                if let Some(n) = p.file_name().and_then(|n| n.to_str()) {
                    out.push(n.to_string());
                }
            }
        }
        out.sort();
        Ok(out)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        if !on_bands(path) {
            return self.inner.sync_file(path);
        }
        if !self.shared.state.lock().names.contains_key(path) {
            return Err(not_found(path));
        }
        sync_store(&self.shared)
    }
    fn exists(&self, path: &Path) -> bool {
        if on_bands(path) {
            self.shared.state.lock().names.contains_key(path)
        } else {
            self.inner.exists(path)
        }
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        if !on_bands(path) {
            return self.inner.file_size(path);
        }
        let st = self.shared.state.lock();
        let id = st.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(st.files.get(id).map_or(0, |f| f.len))
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }
    fn lock_existing(&self, path: &Path) -> io::Result<Option<Box<dyn FileLock>>> {
        self.inner.lock_existing(path)
    }
    fn device_stats(&self) -> Option<DeviceStats> {
        Some(self.stats())
    }
    fn max_table_file_bytes(&self) -> Option<u64> {
        (self.shared.cfg.mode == BandMode::HostManaged).then_some(self.shared.cfg.band_bytes)
    }
}
