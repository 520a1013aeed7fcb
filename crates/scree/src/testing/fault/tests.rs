//! Tests of the fault file system: crashes, directory entries, injected faults.
#![allow(clippy::indexing_slicing, clippy::field_reassign_with_default)]

use super::*;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

#[test]
fn unsynced_bytes_and_entries_are_lost() {
    let fs = FaultFs::new(1);
    fs.create_dir_all(&p("/d")).expect("mkdir");
    let mut a = fs.create(&p("/d/a")).expect("create");
    a.append(b"hello").expect("append");
    a.sync().expect("sync");
    a.append(b" world").expect("append");
    // Not dir-synced: the file vanishes.
    fs.crash(CrashMode::Drop);
    assert!(!fs.exists(&p("/d/a")));

    let mut a = fs.create(&p("/d/a")).expect("create");
    a.append(b"hello").expect("append");
    a.sync().expect("sync");
    fs.sync_dir(&p("/d")).expect("sync dir");
    a.append(b" world").expect("append");
    fs.rename(&p("/d/a"), &p("/d/b")).expect("rename");
    fs.crash(CrashMode::Drop);
    assert_eq!(fs.file_bytes(&p("/d/a")).as_deref(), Some(&b"hello"[..]));
    assert!(!fs.exists(&p("/d/b")));
    // The old handle is dead.
    assert!(a.append(b"x").is_err());
}

#[test]
fn crash_modes_shape_the_tail() {
    for mode in CrashMode::ALL {
        let fs = FaultFs::new(7);
        fs.create_dir_all(&p("/d")).expect("mkdir");
        let mut a = fs.create(&p("/d/a")).expect("create");
        fs.sync_dir(&p("/d")).expect("sync dir");
        a.append(b"0123").expect("append");
        a.sync().expect("sync");
        a.append(&[7u8; 100]).expect("append");
        fs.crash(mode);
        let b = fs.file_bytes(&p("/d/a")).expect("file");
        assert_eq!(&b[..4], b"0123");
        assert!(b.len() <= 104);
        match mode {
            CrashMode::Drop => assert_eq!(b.len(), 4),
            CrashMode::KeepPartial => assert!(b[4..].iter().all(|&x| x == 7)),
            CrashMode::ZeroTail => assert!(b[4..].iter().all(|&x| x == 0)),
            CrashMode::GarbageTail => {}
            CrashMode::KeepWholeWrites => {
                assert!(b.len() == 4 || b.len() == 104, "{}", b.len())
            }
            CrashMode::PagesOutOfOrder => {
                // One page here: everything kept, then zeros from some point on.
                assert_eq!(b.len(), 104);
                let z = b[4..].iter().position(|&x| x == 0).expect("a stale part");
                assert!(b[4 + z..].iter().all(|&x| x == 0));
            }
        }
    }
}

#[test]
fn faults_fire_once_or_persistently() {
    let fs = FaultFs::new(1);
    fs.create_dir_all(&p("/d")).expect("mkdir");
    let mut a = fs.create(&p("/d/a")).expect("create");
    fs.inject(Fault::nth(Some(OpKind::Write), 2).error(FaultError::Enospc));
    a.append(b"1").expect("first append");
    let e = a.append(b"2").expect_err("second append fails");
    assert_eq!(e.raw_os_error(), None);
    assert!(e.to_string().contains("No space"), "{e}");
    a.append(b"3").expect("third append");
    fs.inject(Fault::nth(Some(OpKind::Sync), 1).persistent());
    assert!(a.sync().is_err());
    assert!(a.sync().is_err());
    fs.clear_faults();
    a.sync().expect("sync after clearing");
    fs.inject(Fault::nth(Some(OpKind::Write), 1).short());
    assert!(a.append(b"abcd").is_err());
    assert_eq!(fs.file_bytes(&p("/d/a")).as_deref(), Some(&b"13ab"[..]));
}

#[test]
fn freeze_stops_everything() {
    let fs = FaultFs::new(1);
    fs.create_dir_all(&p("/d")).expect("mkdir");
    let n = fs.ops();
    fs.freeze_at_op(n + 2);
    let mut a = fs.create(&p("/d/a")).expect("op n+1 works");
    assert!(a.append(b"x").is_err());
    assert!(fs.sync_dir(&p("/d")).is_err());
    assert!(fs.is_frozen());
    fs.crash(CrashMode::Drop);
    assert!(!fs.exists(&p("/d/a")));
    fs.create(&p("/d/a")).expect("works after the crash");
}

/// A durable file `/d/name` holding `data`.
fn durable_file(fs: &FaultFs, name: &str, data: &[u8]) {
    let mut w = fs.create(&p(name)).expect("create");
    w.append(data).expect("append");
    w.sync().expect("sync");
    fs.sync_dir(&p("/d")).expect("sync dir");
}

/// What a writer appends to a reopened file is unsynced until its sync: a crash treats
/// those bytes as it treats a new file's (dropped, partly kept, zeros, garbage, …) and
/// never the bytes the file held before. A synced append survives every crash mode.
#[test]
fn bytes_appended_to_a_reopened_file_are_unsynced_until_its_sync() {
    for mode in CrashMode::ALL {
        let fs = FaultFs::new(11).with_dir_entries_out_of_order();
        fs.create_dir_all(&p("/d")).expect("mkdir");
        durable_file(&fs, "/d/t", b"table");
        let mut w = fs.reopen_for_append(&p("/d/t")).expect("reopen");
        assert!(fs.pending_dir_changes().is_empty(), "a reopen is no create");
        assert_eq!(w.len(), 5);
        w.append(&[9u8; 100]).expect("append");
        w.append(&[8u8; 50]).expect("append");
        assert_eq!(w.len(), 155);
        assert_eq!(fs.file_bytes(&p("/d/t")).map(|b| b.len()), Some(155));
        fs.crash(mode);
        let b = fs.file_bytes(&p("/d/t")).expect("the file stays");
        assert_eq!(&b[..5], b"table", "{mode:?}");
        assert!(b.len() <= 155, "{mode:?}");
        match mode {
            CrashMode::Drop => assert_eq!(b.len(), 5),
            CrashMode::KeepWholeWrites => assert!([5, 105, 155].contains(&b.len())),
            CrashMode::KeepPartial => {
                assert!(b[5..].iter().take(100).all(|&x| x == 9), "{mode:?}")
            }
            _ => {}
        }
        assert!(
            w.append(b"x").is_err(),
            "a handle from before the crash is dead"
        );
        let mut w = fs.reopen_for_append(&p("/d/t")).expect("reopen");
        assert_eq!(w.len(), b.len() as u64);
        w.append(b"more").expect("append");
        w.sync().expect("sync");
        fs.crash(mode);
        let after = fs.file_bytes(&p("/d/t")).expect("file");
        assert_eq!(&after[..b.len()], &b[..], "{mode:?}");
        assert_eq!(&after[b.len()..], b"more", "{mode:?}");
    }
    let fs = FaultFs::new(1);
    fs.create_dir_all(&p("/d")).expect("mkdir");
    assert!(fs.reopen_for_append(&p("/d/none")).is_err());
}

#[test]
fn out_of_order_creates_survive_independently_and_deterministically() {
    // (a survived, b survived) for each seed.
    let run = |seed: u64| {
        let fs = FaultFs::new(seed).with_dir_entries_out_of_order();
        fs.create_dir_all(&p("/d")).expect("mkdir");
        for name in ["/d/a", "/d/b"] {
            let mut w = fs.create(&p(name)).expect("create");
            w.append(name.as_bytes()).expect("append");
            w.sync().expect("sync");
        }
        assert_eq!(fs.pending_dir_changes(), ["create /d/a", "create /d/b"]);
        fs.crash(CrashMode::Drop);
        let got = (fs.exists(&p("/d/a")), fs.exists(&p("/d/b")));
        // A surviving entry points at the file's synced bytes.
        for (name, there) in [("/d/a", got.0), ("/d/b", got.1)] {
            let want = there.then(|| name.as_bytes().to_vec());
            assert_eq!(fs.file_bytes(&p(name)), want, "seed {seed}");
        }
        assert_eq!(
            fs.dir_changes_at_last_crash(),
            [
                ("create /d/a".to_string(), got.0),
                ("create /d/b".to_string(), got.1)
            ]
        );
        assert!(fs.pending_dir_changes().is_empty());
        got
    };
    let mut seen = BTreeSet::new();
    for seed in 0..64 {
        let got = run(seed);
        assert_eq!(run(seed), got, "seed {seed} is not deterministic");
        seen.insert(got);
    }
    // A create that survives, one that does not, and every combination of the two.
    assert_eq!(seen.len(), 4, "{seen:?}");
}

#[test]
fn out_of_order_renames_are_atomic_and_removes_all_or_nothing() {
    let mut seen = BTreeSet::new();
    for seed in 0..64 {
        let fs = FaultFs::new(seed);
        fs.set_dir_entries_out_of_order(true);
        assert!(fs.dir_entries_out_of_order());
        fs.create_dir_all(&p("/d")).expect("mkdir");
        durable_file(&fs, "/d/CURRENT", b"v1");
        durable_file(&fs, "/d/x", b"x");
        durable_file(&fs, "/d/r", b"r");
        // The CURRENT pattern: temp file, sync, rename over the old one.
        let mut w = fs.create(&p("/d/tmp")).expect("create");
        w.append(b"v2").expect("append");
        w.sync().expect("sync");
        fs.rename(&p("/d/tmp"), &p("/d/CURRENT")).expect("rename");
        fs.rename(&p("/d/x"), &p("/d/y")).expect("rename");
        fs.remove(&p("/d/r")).expect("remove");
        // Created and removed before any sync: it can come back.
        let mut w = fs.create(&p("/d/gone")).expect("create");
        w.append(b"g").expect("append");
        w.sync().expect("sync");
        fs.remove(&p("/d/gone")).expect("remove");
        fs.crash(CrashMode::Drop);
        let bytes = |n: &str| fs.file_bytes(&p(n));
        let renamed = bytes("/d/CURRENT") == Some(b"v2".to_vec());
        if renamed {
            assert_eq!(bytes("/d/tmp"), None, "seed {seed}");
        } else {
            assert_eq!(bytes("/d/CURRENT").as_deref(), Some(&b"v1"[..]));
            // The temp file's create may have survived without the rename.
            assert!(matches!(bytes("/d/tmp").as_deref(), None | Some(b"v2")));
        }
        // A rename is never half done: the file is under exactly one of its names.
        let moved = match (bytes("/d/x"), bytes("/d/y")) {
            (Some(a), None) if a == b"x" => false,
            (None, Some(b)) if b == b"x" => true,
            other => panic!("seed {seed}: rename half applied: {other:?}"),
        };
        let removed = match bytes("/d/r") {
            None => true,
            Some(r) if r == b"r" => false,
            Some(r) => panic!("seed {seed}: {r:?}"),
        };
        let back = match bytes("/d/gone") {
            None => false,
            Some(g) if g == b"g" => true,
            Some(g) => panic!("seed {seed}: {g:?}"),
        };
        seen.insert((renamed, moved, removed, back));
        // The survivors are durable now: a second crash keeps exactly them.
        let files = fs.files();
        fs.crash(CrashMode::Drop);
        assert_eq!(fs.files(), files);
    }
    for i in 0..4 {
        let values: BTreeSet<bool> = seen.iter().map(|t| [t.0, t.1, t.2, t.3][i]).collect();
        assert_eq!(
            values.len(),
            2,
            "change {i} always or never survived: {seen:?}"
        );
    }
}

#[test]
fn out_of_order_changes_a_dir_sync_covered_all_survive() {
    for seed in 0..16 {
        let fs = FaultFs::new(seed).with_dir_entries_out_of_order();
        fs.create_dir_all(&p("/d")).expect("mkdir");
        fs.create_dir_all(&p("/e")).expect("mkdir");
        durable_file(&fs, "/d/a", b"a");
        fs.create(&p("/d/b")).expect("create");
        fs.rename(&p("/d/a"), &p("/d/c")).expect("rename");
        fs.create(&p("/e/f")).expect("create");
        fs.sync_dir(&p("/d")).expect("sync dir");
        // Only the change in the other directory is still pending.
        assert_eq!(fs.pending_dir_changes(), ["create /e/f"]);
        let copy = fs.deep_clone();
        assert!(copy.dir_entries_out_of_order());
        assert_eq!(copy.pending_dir_changes(), ["create /e/f"]);
        fs.crash(CrashMode::Drop);
        assert!(fs.exists(&p("/d/b")) && fs.exists(&p("/d/c")) && !fs.exists(&p("/d/a")));
    }
    // Off again: nothing is recorded and a crash loses every unsynced change.
    let fs = FaultFs::new(3).with_dir_entries_out_of_order();
    fs.set_dir_entries_out_of_order(false);
    fs.create_dir_all(&p("/d")).expect("mkdir");
    fs.create(&p("/d/a")).expect("create");
    assert!(fs.pending_dir_changes().is_empty());
    fs.crash(CrashMode::Drop);
    assert!(fs.files().is_empty() && fs.dir_changes_at_last_crash().is_empty());
}

#[test]
fn lock_excludes_a_second_holder() {
    let fs = FaultFs::new(1);
    let l = fs.lock(&p("/d/LOCK")).expect("lock");
    assert_eq!(
        fs.lock(&p("/d/LOCK")).err().map(|e| e.kind()),
        Some(io::ErrorKind::WouldBlock)
    );
    drop(l);
    fs.lock(&p("/d/LOCK")).expect("lock again");
}
