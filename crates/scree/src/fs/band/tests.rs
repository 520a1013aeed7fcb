//! Tests of the band emulator: exact device-byte accounting of small cases worked out by hand,
//! typed errors, and a model test of random file operations in both modes.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::fs::std_fs::StdFs;
use crate::testing::fault::FaultFs;

const BAND: u64 = 64 * 1024;

fn device(mode: BandMode, bands: u64) -> BandFs {
    let cfg = BandConfig {
        mode,
        band_bytes: BAND,
        bands,
        backing: Backing::Memory,
    };
    let inner = FaultFs::new(1);
    inner.create_dir_all(Path::new("/db")).expect("mkdir");
    BandFs::new(inner.as_dyn(), cfg).expect("device")
}

fn p(name: &str) -> PathBuf {
    Path::new("/db").join(name)
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn write_file(fs: &BandFs, name: &str, data: &[u8]) {
    let mut w = fs.create(&p(name)).expect("create");
    w.append(data).expect("append");
    w.sync().expect("sync");
}

fn read_file(fs: &BandFs, name: &str) -> Vec<u8> {
    fs.read_all(&p(name)).expect("read")
}

#[test]
fn append_only_file_costs_awa_one() {
    for mode in [BandMode::HostManaged, BandMode::DriveManaged] {
        let fs = device(mode, 8);
        let data = bytes(1, 50_000);
        let mut w = fs.create(&p("000001.sst")).expect("create");
        for chunk in data.chunks(4096) {
            w.append(chunk).expect("append");
        }
        w.finish().expect("finish");
        drop(w);
        assert_eq!(read_file(&fs, "000001.sst"), data);
        let s = fs.stats();
        assert_eq!(s.host_bytes_written, 50_000, "{mode:?}");
        assert_eq!(s.device_bytes_written, 50_000, "{mode:?}");
        assert_eq!(s.awa, 1.0, "{mode:?}");
        assert_eq!(s.read_modify_writes, 0);
        assert_eq!(s.host_bytes_read, 50_000);
        assert_eq!(s.device_bytes_read, 50_000);
        assert_eq!(s.live_bytes, 50_000);
        assert_eq!(s.bands_in_use, 1);
    }
}

#[test]
fn drive_managed_write_in_a_hole_rewrites_the_rest_of_the_band() {
    let fs = device(BandMode::DriveManaged, 8);
    // A at [0, 30000), B at [30000, 50000) of band 0.
    write_file(&fs, "000001.sst", &bytes(1, 30_000));
    write_file(&fs, "000002.sst", &bytes(2, 20_000));
    fs.remove(&p("000001.sst")).expect("remove");
    // C goes first fit into A's hole at 0: B's 20000 valid bytes after it are read back and
    // rewritten.
    let c = bytes(3, 10_000);
    let mut w = fs.create(&p("000003.sst")).expect("create");
    w.append(&c).expect("append");
    w.sync().expect("sync");
    let s = fs.stats();
    assert_eq!(s.host_bytes_written, 60_000);
    assert_eq!(s.device_bytes_written, 60_000 + 20_000);
    assert_eq!(s.device_bytes_read, 20_000);
    assert_eq!(s.read_modify_writes, 1);
    assert_eq!(s.rmw_bytes, 20_000);
    // C grows in place at [10000, 15000): B is still after it, another read-modify-write.
    w.append(&bytes(4, 5_000)).expect("append");
    w.sync().expect("sync");
    drop(w);
    let s = fs.stats();
    assert_eq!(s.device_bytes_written, 65_000 + 40_000);
    assert_eq!(s.read_modify_writes, 2);
    assert_eq!(s.awa, 105_000.0 / 65_000.0);
    let mut want = c;
    want.extend(bytes(4, 5_000));
    assert_eq!(read_file(&fs, "000003.sst"), want);
    assert_eq!(read_file(&fs, "000002.sst"), bytes(2, 20_000));
    assert_eq!(fs.stats().live_bytes, 35_000);
    // A large file fills the hole [15000, 30000) first (B after it: one more read-modify-write
    // of B's 20000 bytes), then runs on from 50000 through band 1 into band 2 (no valid byte
    // after those pieces).
    let d = bytes(5, 100_000);
    write_file(&fs, "000004.sst", &d);
    let s2 = fs.stats();
    assert_eq!(
        s2.device_bytes_written - s.device_bytes_written,
        100_000 + 20_000
    );
    assert_eq!(s2.read_modify_writes, 3);
    assert_eq!(read_file(&fs, "000004.sst"), d);
    assert_eq!(s2.bands_in_use, 3);
}

#[test]
fn host_managed_tail_overwrite_is_free_and_delete_resets_the_band() {
    let fs = device(BandMode::HostManaged, 2);
    write_file(&fs, "000001.sst", &bytes(1, 30_000));
    // Write over the last 10000 bytes (the LWC tail): the write pointer moves back.
    let mut w = fs
        .reopen_truncated(&p("000001.sst"), 20_000)
        .expect("reopen");
    assert_eq!(w.len(), 20_000);
    w.append(&bytes(2, 15_000)).expect("append");
    w.sync().expect("sync");
    drop(w);
    let mut want = bytes(1, 30_000);
    want.truncate(20_000);
    want.extend(bytes(2, 15_000));
    assert_eq!(read_file(&fs, "000001.sst"), want);
    let s = fs.stats();
    assert_eq!(s.host_bytes_written, 45_000);
    assert_eq!(s.device_bytes_written, 45_000);
    assert_eq!(s.truncations, 1);
    assert_eq!(s.bands_in_use, 1);
    // Appending at the end again.
    let mut w = fs.reopen_for_append(&p("000001.sst")).expect("reopen");
    assert_eq!(w.len(), 35_000);
    w.append(b"xyz").expect("append");
    drop(w);
    assert_eq!(fs.file_size(&p("000001.sst")).expect("size"), 35_003);
    // Two bands: a second file fits, a third does not; deleting one frees its band.
    write_file(&fs, "000002.sst", b"two");
    let err = fs
        .create(&p("000003.sst"))
        .map(|_| ())
        .expect_err("no band");
    assert_eq!(err.kind(), io::ErrorKind::StorageFull);
    assert!(err.to_string().contains("in-memory SMR device"), "{err}");
    assert!(err.to_string().contains("no free band"), "{err}");
    fs.remove(&p("000001.sst")).expect("remove");
    assert_eq!(fs.stats().band_resets, 1);
    write_file(&fs, "000003.sst", b"three");
    assert_eq!(read_file(&fs, "000003.sst"), b"three");
    assert_eq!(read_file(&fs, "000002.sst"), b"two");
}

#[test]
fn host_managed_file_larger_than_a_band_is_refused() {
    let fs = device(BandMode::HostManaged, 4);
    let mut w = fs.create(&p("000001.sst")).expect("create");
    w.append(&bytes(1, BAND as usize - 10)).expect("append");
    let err = w.append(&[0; 11]).expect_err("past the band");
    assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
    assert!(err.to_string().contains("one table file per band"), "{err}");
    // The refused append took nothing; the file still fills to the band's end.
    w.append(&[7; 10]).expect("append");
    w.sync().expect("sync");
    drop(w);
    assert_eq!(fs.file_size(&p("000001.sst")).expect("size"), BAND);
}

#[test]
fn drive_managed_out_of_space_is_typed() {
    let fs = device(BandMode::DriveManaged, 2);
    write_file(&fs, "000001.sst", &bytes(1, 100_000));
    let mut w = fs.create(&p("000002.sst")).expect("create");
    w.append(&bytes(2, 40_000)).expect("append (gathered)");
    let err = w.sync().expect_err("no space");
    assert_eq!(err.kind(), io::ErrorKind::StorageFull);
    assert!(err.to_string().contains("out of space"), "{err}");
    // The writer is poisoned; the device is unchanged.
    assert!(w.sync().is_err());
    drop(w);
    assert_eq!(fs.stats().live_bytes, 100_000);
    assert_eq!(read_file(&fs, "000001.sst"), bytes(1, 100_000));
}

#[test]
fn removed_file_stays_readable_until_closed() {
    for mode in [BandMode::HostManaged, BandMode::DriveManaged] {
        let fs = device(mode, 4);
        write_file(&fs, "000001.sst", &bytes(1, 9_000));
        let r = fs.open(&p("000001.sst"), false).expect("open");
        fs.remove(&p("000001.sst")).expect("remove");
        assert!(!fs.exists(&p("000001.sst")));
        // New files cannot take its space while it is open.
        write_file(&fs, "000002.sst", &bytes(2, 9_000));
        assert_eq!(r.read_at(0, 9_000).expect("read"), bytes(1, 9_000));
        assert_eq!(fs.stats().live_bytes, 18_000, "{mode:?}");
        drop(r);
        assert_eq!(fs.stats().live_bytes, 9_000, "{mode:?}");
    }
}

#[test]
fn conventional_files_pass_through_and_are_counted() {
    let fs = device(BandMode::DriveManaged, 4);
    let mut w = fs.create(&p("MANIFEST-000001")).expect("create");
    w.append(b"manifest").expect("append");
    w.sync().expect("sync");
    drop(w);
    write_file(&fs, "000005.sst", b"table");
    assert_eq!(read_file(&fs, "MANIFEST-000001"), b"manifest");
    let s = fs.stats();
    assert_eq!(s.conventional_bytes_written, 8);
    assert_eq!(s.host_bytes_written, 13);
    assert_eq!(s.device_bytes_written, 13);
    assert_eq!(s.conventional_bytes_read, 8);
    assert_eq!(
        fs.list(Path::new("/db")).expect("list"),
        vec!["000005.sst".to_string(), "MANIFEST-000001".to_string()]
    );
    let err = fs
        .rename(&p("MANIFEST-000001"), &p("000006.sst"))
        .expect_err("mixed rename");
    assert_eq!(err.kind(), io::ErrorKind::Unsupported);
    fs.rename(&p("000005.sst"), &p("000007.sst"))
        .expect("rename");
    assert_eq!(read_file(&fs, "000007.sst"), b"table");
    assert!(fs.open(&p("000005.sst"), false).is_err());
    assert!(fs.reopen_truncated(&p("000007.sst"), 6).is_err());
}

#[test]
fn file_backed_device_lives_beside_the_first_table_and_is_hidden() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = BandFs::new(
        Arc::new(StdFs),
        BandConfig::new(BandMode::DriveManaged, 1 << 20),
    )
    .expect("device");
    let t = dir.path().join("000001.sst");
    let data = bytes(9, 3 << 20);
    let mut w = fs.create(&t).expect("create");
    w.append(&data).expect("append");
    w.sync().expect("sync");
    drop(w);
    assert!(dir.path().join(DEVICE_FILE).exists());
    assert_eq!(fs.read_all(&t).expect("read"), data);
    assert_eq!(
        fs.list(dir.path()).expect("list"),
        vec!["000001.sst".to_string()]
    );
    assert_eq!(fs.stats().bands_in_use, 3);
    assert_eq!(fs.stats().awa, 1.0);
}

#[test]
fn bad_shapes_are_refused() {
    let inner: Arc<dyn FileSystem> = Arc::new(StdFs);
    let mut cfg = BandConfig::new(BandMode::HostManaged, 100);
    assert!(BandFs::new(inner.clone(), cfg.clone()).is_err());
    cfg.band_bytes = 1 << 20;
    cfg.bands = 0;
    assert!(BandFs::new(inner.clone(), cfg.clone()).is_err());
    cfg.bands = u64::MAX;
    assert!(BandFs::new(inner, cfg).is_err());
}

// ---- model test ----

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Append(u8, u16),
    Flush(u8),
    Sync(u8),
    Close(u8),
    ReopenAppend(u8),
    /// Reopen cutting the file at `n`/255 of its length.
    ReopenCut(u8, u8),
    Read(u8, u16, u16),
    HoldReader(u8),
    DropReader,
    Remove(u8),
    Rename(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    let f = 0u8..6;
    prop_oneof![
        4 => f.clone().prop_map(Op::Create),
        10 => (f.clone(), 1u16..20_000).prop_map(|(a, n)| Op::Append(a, n)),
        2 => f.clone().prop_map(Op::Flush),
        2 => f.clone().prop_map(Op::Sync),
        3 => f.clone().prop_map(Op::Close),
        2 => f.clone().prop_map(Op::ReopenAppend),
        2 => (f.clone(), any::<u8>()).prop_map(|(a, n)| Op::ReopenCut(a, n)),
        5 => (f.clone(), any::<u16>(), any::<u16>()).prop_map(|(a, o, n)| Op::Read(a, o, n)),
        1 => f.clone().prop_map(Op::HoldReader),
        1 => Just(Op::DropReader),
        3 => f.clone().prop_map(Op::Remove),
        1 => (f.clone(), f).prop_map(|(a, b)| Op::Rename(a, b)),
    ]
}

fn name(i: u8) -> PathBuf {
    p(&format!("{:06}.sst", i))
}

/// Runs `ops` on a device of `mode` and checks file contents, lengths, listings and the
/// accounting identities against a model of the files.
fn run_model(mode: BandMode, ops: &[Op]) -> Result<(), TestCaseError> {
    let fs = device(
        mode,
        if mode == BandMode::HostManaged {
            16
        } else {
            64
        },
    );
    // Linked files' contents (including bytes writers still gather).
    let mut model: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    let mut writers: BTreeMap<PathBuf, Box<dyn WritableFile>> = BTreeMap::new();
    // Held readers, what their file held when opened, and its name while it has one.
    type Held = Vec<(Arc<dyn ReadableFile>, Vec<u8>, Option<PathBuf>)>;
    let mut held: Held = Vec::new();
    // The file at `path` loses its name: its held readers keep what it holds now.
    fn unlink(held: &mut Held, path: &Path, model: &BTreeMap<PathBuf, Vec<u8>>) {
        for h in held.iter_mut() {
            if h.2.as_deref() == Some(path) {
                h.1 = model.get(path).cloned().unwrap_or_default();
                h.2 = None;
            }
        }
    }
    let mut appended = 0u64;
    let mut seed = 0u8;
    for op in ops {
        match op {
            Op::Create(i) => {
                let path = name(*i);
                writers.remove(&path);
                unlink(&mut held, &path, &model);
                match fs.create(&path) {
                    Ok(w) => {
                        model.insert(path.clone(), Vec::new());
                        writers.insert(path, w);
                    }
                    Err(e) => {
                        // Only a host-managed device can run out (16 bands, 6 names, held
                        // readers keep removed files' bands).
                        prop_assert_eq!(e.kind(), io::ErrorKind::StorageFull);
                        prop_assert!(held.len() + model.len() >= 16);
                        model.remove(&path);
                    }
                }
            }
            Op::Append(i, n) => {
                let path = name(*i);
                if let Some(w) = writers.get_mut(&path) {
                    seed = seed.wrapping_add(1);
                    let data = bytes(seed, *n as usize);
                    let content = model.get_mut(&path).expect("writer of a linked file");
                    let fits = mode == BandMode::DriveManaged
                        || content.len() as u64 + u64::from(*n) <= BAND;
                    match w.append(&data) {
                        Ok(()) => {
                            prop_assert!(fits);
                            content.extend_from_slice(&data);
                            appended += u64::from(*n);
                        }
                        Err(e) => {
                            prop_assert!(!fits, "{e}");
                            prop_assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
                        }
                    }
                    prop_assert_eq!(w.len(), content.len() as u64);
                }
            }
            Op::Flush(i) | Op::Sync(i) => {
                if let Some(w) = writers.get_mut(&name(*i)) {
                    if matches!(op, Op::Flush(_)) {
                        w.flush().expect("flush");
                    } else {
                        w.sync().expect("sync");
                    }
                }
            }
            Op::Close(i) => {
                writers.remove(&name(*i));
            }
            Op::ReopenAppend(i) | Op::ReopenCut(i, _) => {
                let path = name(*i);
                writers.remove(&path);
                let Some(content) = model.get_mut(&path) else {
                    prop_assert!(fs.reopen_for_append(&path).is_err());
                    continue;
                };
                let w = if let Op::ReopenCut(_, frac) = op {
                    let at = content.len() * usize::from(*frac) / 255;
                    content.truncate(at);
                    fs.reopen_truncated(&path, at as u64).expect("reopen cut")
                } else {
                    fs.reopen_for_append(&path).expect("reopen")
                };
                prop_assert_eq!(w.len(), content.len() as u64);
                writers.insert(path, w);
            }
            Op::Read(i, off, n) => {
                let path = name(*i);
                if let Some(w) = writers.get_mut(&path) {
                    w.flush().expect("flush");
                }
                match model.get(&path) {
                    None => prop_assert!(fs.open(&path, false).is_err()),
                    Some(content) => {
                        let r = fs.open(&path, false).expect("open");
                        prop_assert_eq!(r.len(), content.len() as u64);
                        let off = u64::from(*off) % (content.len() as u64 + 1);
                        let n = usize::from(*n) % 30_000;
                        let got = r.read_at(off, n);
                        let end = off as usize + n;
                        match content.get(off as usize..end) {
                            Some(want) => prop_assert_eq!(&got.expect("read"), want),
                            None => prop_assert_eq!(
                                got.expect_err("past end").kind(),
                                io::ErrorKind::UnexpectedEof
                            ),
                        }
                    }
                }
            }
            Op::HoldReader(i) => {
                let path = name(*i);
                if let Some(w) = writers.get_mut(&path) {
                    w.flush().expect("flush");
                }
                if let Some(content) = model.get(&path) {
                    let r = fs.open(&path, false).expect("open");
                    held.push((r, content.clone(), Some(path)));
                }
            }
            Op::DropReader => {
                held.pop();
            }
            Op::Remove(i) => {
                let path = name(*i);
                writers.remove(&path);
                unlink(&mut held, &path, &model);
                let res = fs.remove(&path);
                prop_assert_eq!(res.is_ok(), model.remove(&path).is_some());
            }
            Op::Rename(a, b) => {
                let (from, to) = (name(*a), name(*b));
                if from == to {
                    continue;
                }
                writers.remove(&from);
                writers.remove(&to);
                if model.contains_key(&from) {
                    unlink(&mut held, &to, &model);
                }
                for h in held.iter_mut() {
                    if h.2.as_deref() == Some(from.as_path()) {
                        h.2 = Some(to.clone());
                    }
                }
                let res = fs.rename(&from, &to);
                match model.remove(&from) {
                    Some(c) => {
                        res.expect("rename");
                        model.insert(to, c);
                    }
                    None => prop_assert!(res.is_err()),
                }
            }
        }
        // A reader of a file that was removed or replaced reads what the file held then.
        for (r, content, linked) in &held {
            if linked.is_none() {
                prop_assert_eq!(r.len(), content.len() as u64);
                if !content.is_empty() {
                    prop_assert_eq!(&r.read_at(0, content.len()).expect("held read"), content);
                }
            }
        }
    }
    // Everything reaches the device.
    writers.clear();
    held.clear();
    let mut listed = fs.list(Path::new("/db")).expect("list");
    listed.sort();
    let names: Vec<String> = model
        .keys()
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    prop_assert_eq!(listed, names);
    for (path, content) in &model {
        prop_assert_eq!(&fs.read_all(path).expect("read"), content);
        prop_assert_eq!(fs.file_size(path).expect("size"), content.len() as u64);
    }
    let s = fs.stats();
    let live: u64 = model.values().map(|c| c.len() as u64).sum();
    prop_assert_eq!(s.live_bytes, live);
    prop_assert_eq!(s.host_bytes_written, appended);
    prop_assert_eq!(s.device_bytes_written, s.host_bytes_written + s.rmw_bytes);
    prop_assert_eq!(s.device_bytes_read, s.host_bytes_read + s.rmw_bytes);
    match mode {
        BandMode::HostManaged => {
            prop_assert_eq!(s.rmw_bytes, 0);
            prop_assert_eq!(s.bands_in_use, model.len() as u64);
        }
        BandMode::DriveManaged => {
            prop_assert_eq!(s.band_resets, 0);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn band_device_matches_a_model_of_its_files(ops in prop::collection::vec(op(), 1..120)) {
        run_model(BandMode::HostManaged, &ops)?;
        run_model(BandMode::DriveManaged, &ops)?;
    }
}

/// A database opened with `Options::device` keeps its tables on the emulator (not in the
/// directory), reopens through the same options, and reports the device in `Stats`.
#[test]
fn a_database_on_the_device_reopens_and_reports_it() {
    use crate::{Db, Device, KeyspaceOptions, Layout, Options};
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = Options::default().device(Device::SmrHost { band_mb: 0 });
    assert!(matches!(bad, Err(crate::Error::InvalidArgument(_))));
    let opts = Options::default()
        .device(Device::SmrDrive { band_mb: 1 })
        .expect("device");
    let mut ko = KeyspaceOptions::new(Layout::Leveled);
    ko.write_buffer_bytes = 64 << 10;
    let key = |i: u32| format!("key{i:06}").into_bytes();
    {
        let db = Db::open(dir.path(), opts.clone()).expect("open");
        let ks = db.keyspace("t", ko.clone()).expect("keyspace");
        for i in 0..5_000u32 {
            ks.put(key(i), vec![b'v'; 100]).expect("put");
        }
        db.flush().expect("flush");
        let d = db.stats().device.expect("device stats");
        assert_eq!(d.mode, BandMode::DriveManaged);
        assert!(d.live_bytes > 0 && d.host_bytes_written >= d.live_bytes);
        assert_eq!(d.device_bytes_written, d.host_bytes_written + d.rmw_bytes);
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n == DEVICE_FILE), "{names:?}");
    assert!(!names.iter().any(|n| n.ends_with(".sst")), "{names:?}");
    let db = Db::open(dir.path(), opts).expect("reopen");
    let ks = db.keyspace("t", ko).expect("keyspace");
    for i in (0..5_000u32).step_by(97) {
        assert_eq!(ks.get(key(i)).expect("get"), Some(vec![b'v'; 100]));
    }
    drop(ks);
    drop(db);
    let plain = Db::open(
        tempfile::tempdir().expect("tempdir").path(),
        Options::default(),
    )
    .expect("open on files");
    assert!(plain.stats().device.is_none());
}

/// Threads writing, reading back and removing their own files at once, on a file-backed
/// device (reads outside the lock): every read returns its file's bytes, and at the end the
/// device holds nothing and has counted every byte.
#[test]
fn concurrent_writers_and_readers_see_their_own_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    for mode in [BandMode::HostManaged, BandMode::DriveManaged] {
        let mut cfg = BandConfig::new(mode, 64 << 10);
        cfg.backing = Backing::File(dir.path().join(format!("{mode:?}.dev")));
        let fs = Arc::new(BandFs::new(Arc::new(StdFs), cfg).expect("device"));
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let fs = fs.clone();
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let mut written = 0u64;
                    for round in 0..40u8 {
                        let path = dir.join(format!("{t}{round:05}.sst"));
                        let data = bytes(t ^ round, 1_000 + usize::from(round) * 1_000);
                        let mut w = fs.create(&path).expect("create");
                        for c in data.chunks(3_000) {
                            w.append(c).expect("append");
                        }
                        w.sync().expect("sync");
                        drop(w);
                        written += data.len() as u64;
                        let r = fs.open(&path, false).expect("open");
                        assert_eq!(r.read_at(0, data.len()).expect("read"), data);
                        fs.remove(&path).expect("remove");
                        // Still readable through the open reader.
                        assert_eq!(r.read_at(7, 100).expect("read"), &data[7..107]);
                    }
                    written
                })
            })
            .collect();
        let written: u64 = threads.into_iter().map(|h| h.join().expect("thread")).sum();
        let s = fs.stats();
        assert_eq!(s.host_bytes_written, written, "{mode:?}");
        assert_eq!(s.device_bytes_written, written + s.rmw_bytes, "{mode:?}");
        assert_eq!(s.live_bytes, 0, "{mode:?}");
        assert_eq!(s.bands_in_use, 0, "{mode:?}");
    }
}
