//! The inspection commands end to end, through the built `scree` binary: what `put`, `delete`,
//! `get` and `scan` print and exit with, `dump` and `stats` against the library's own view, and
//! that the read-only commands leave every file as it was.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use scree::{Db, KeyspaceOptions, Layout, Options};

fn scree(args: &[&str]) -> Output {
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_scree"))
            .args(args)
            .output()
            .expect("run scree")
    };
    // Tests run in parallel threads, and a child another test is starting holds a copy of
    // every open descriptor between its fork and its exec, the database's LOCK included: a
    // database a test has just closed can look locked for that moment. A second try tells
    // that window from a lock really held (which the second try meets too).
    let o = run();
    if o.status.code() == Some(2) && stderr(&o).contains("is locked by another process") {
        std::thread::sleep(std::time::Duration::from_millis(200));
        return run();
    }
    o
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("read"))
        })
        .collect()
}

#[test]
fn put_get_scan_and_delete_through_the_command_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let d = dir.to_str().expect("utf-8 path");
    // Without --create, a missing database is an error (exit 2) and nothing is created.
    let o = scree(&["put", d, "users", "alice", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!dir.exists());
    let o = scree(&["put", d, "users", "alice", "1", "--create", "leveled"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for i in 1..=5 {
        let v = format!("value {i}");
        let o = scree(&["put", d, "users", &format!("user{i}"), &v]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    // Non-UTF-8 bytes through --hex: key ff00, value 00 01 fe.
    let o = scree(&["put", d, "users", "ff00", "0001fe", "--hex", "--sync"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let o = scree(&["get", d, "users", "user3"]);
    assert_eq!((o.status.code(), stdout(&o)), (Some(0), "value 3\n".into()));
    let o = scree(&["get", d, "users", "ff00", "--hex"]);
    assert_eq!((o.status.code(), stdout(&o)), (Some(0), "0001fe\n".into()));
    // Without --hex the same value prints escaped.
    let o = scree(&["scan", d, "users", "--from", "\u{7f}"]);
    assert_eq!(stdout(&o), "\\xff\\x00 ==> \\x00\\x01\\xfe\n");
    let o = scree(&["get", d, "users", "bob"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "not found: bob\n");

    let o = scree(&["scan", d, "users", "--limit", "3"]);
    assert_eq!(
        stdout(&o),
        "alice ==> 1\nuser1 ==> value 1\nuser2 ==> value 2\n"
    );
    let o = scree(&[
        "scan",
        d,
        "users",
        "--prefix",
        "user",
        "--reverse",
        "--keys-only",
    ]);
    assert_eq!(stdout(&o), "user5\nuser4\nuser3\nuser2\nuser1\n");
    let o = scree(&["scan", d, "users", "--from", "user2", "--to", "user4"]);
    assert_eq!(stdout(&o), "user2 ==> value 2\nuser3 ==> value 3\n");
    // A prefix with a range: both apply, either way round.
    let o = scree(&[
        "scan", d, "users", "--prefix", "user", "--from", "a", "--to", "user3",
    ]);
    assert_eq!(stdout(&o), "user1 ==> value 1\nuser2 ==> value 2\n");
    let o = scree(&[
        "scan",
        d,
        "users",
        "--prefix",
        "us",
        "--from",
        "user4",
        "--reverse",
    ]);
    assert_eq!(stdout(&o), "user5 ==> value 5\nuser4 ==> value 4\n");
    let o = scree(&[
        "scan",
        d,
        "users",
        "--prefix",
        "al",
        "--to",
        "b",
        "--keys-only",
    ]);
    assert_eq!(stdout(&o), "alice\n");

    let o = scree(&["delete", d, "users", "user3"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = scree(&["get", d, "users", "user3"]);
    assert_eq!(o.status.code(), Some(1));
    let o = scree(&["scan", d, "users", "--prefix", "user", "--keys-only"]);
    assert_eq!(stdout(&o), "user1\nuser2\nuser4\nuser5\n");

    // The library reads the same.
    let db = Db::open(&dir, Options::default()).expect("open");
    let ks = db.existing_keyspace("users").expect("keyspace");
    assert_eq!(ks.get(b"user2").expect("get"), Some(b"value 2".to_vec()));
    assert_eq!(ks.get(b"user3").expect("get"), None);
    assert_eq!(
        ks.get([0xff, 0x00]).expect("get"),
        Some(vec![0x00, 0x01, 0xfe])
    );
}

#[test]
fn errors_name_what_is_wrong_and_exit_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().to_str().expect("utf-8 path");
    let o = scree(&["put", d, "t", "k", "v", "--create", "trie"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = scree(&["get", d, "nope", "k"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no keyspace named \"nope\" (the database has [\"t\"])"),
        "{}",
        stderr(&o)
    );
    for bad in ["abc", "+a+b", "0x", "zz"] {
        let o = scree(&["get", d, "t", bad, "--hex"]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(stderr(&o).contains("not hex"), "{bad}: {}", stderr(&o));
    }
    // A trie keyspace is hash-ordered: scans say so.
    let o = scree(&["scan", d, "t"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("places keys by hash"), "{}", stderr(&o));
    let o = scree(&["get", d, "t", "k"]);
    assert_eq!((o.status.code(), stdout(&o)), (Some(0), "v\n".into()));
    // A database another process holds is refused, not read beside it.
    let db = Db::open(tmp.path(), Options::default()).expect("open");
    let o = scree(&["get", d, "t", "k"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("locked"), "{}", stderr(&o));
    drop(db);
}

#[test]
fn dump_and_stats_list_what_the_library_sees_and_change_no_file() {
    for layout in [Layout::Leveled, Layout::Fragmented, Layout::Trie] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path().to_str().expect("utf-8 path");
        let n = 3000u64;
        let tables = {
            let mut o = KeyspaceOptions::new(layout);
            o.write_buffer_bytes = 64 << 10;
            o.trie.pile_size = 2;
            o.trie.last_level_depth = 2;
            // Compacted tables as small as the flushed ones, so that however the compactions
            // fall, leveled keeps more than two (with 2 MiB ones it once kept an L1 table and
            // one L0 table).
            o.leveled.target_table_bytes = 64 << 10;
            o.fragmented.l0_compaction_trigger = 2;
            o.fragmented.top_level_bits = 6;
            o.fragmented.bit_decrement = 1;
            o.fragmented.max_levels = 4;
            let db = Db::open(tmp.path(), Options::default()).expect("open");
            let ks = db.keyspace("ks", o).expect("keyspace");
            for i in 0..n {
                ks.put(format!("key{i:06}"), [b'v'; 100]).expect("put");
            }
            db.flush().expect("flush");
            db.wait_for_compactions().expect("wait");
            ks.tables()
        };
        assert!(tables.len() > 2, "{layout}: {} tables", tables.len());
        let before = files(tmp.path());

        let o = scree(&["dump", d, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
        let ks = &v[0];
        assert_eq!(ks["keyspace"], "ks");
        assert_eq!(ks["layout"], layout.name());
        let listed = ks["tables"].as_array().expect("tables");
        assert_eq!(listed.len(), tables.len(), "{layout}");
        for (j, t) in listed.iter().zip(&tables) {
            assert_eq!(j["file"], t.file.as_str());
            assert_eq!(j["level"], t.level);
            assert_eq!(j["place"], t.place.as_str());
            assert_eq!(j["entries"], t.entries);
            let on_disk = before
                .get(&t.file)
                .unwrap_or_else(|| panic!("{layout}: {} not on disk", t.file));
            // Each file as the format registry names and describes it.
            let (_, ext) = t.file.rsplit_once('.').expect("an extension");
            let format = scree::table_format::by_ext(ext).expect("a registered format");
            assert_eq!(j["format"], format.name, "{layout}: {}", t.file);
            let d = &j["describe"];
            assert!(d.get("error").is_none(), "{layout}: {}: {d}", t.file);
            assert_eq!(d["size"], on_disk.len(), "{layout}: {}", t.file);
        }
        // Every key is in exactly one table (nothing was overwritten), BloomClusters hold none.
        let entries: u64 = tables.iter().map(|t| t.entries).sum();
        assert_eq!(entries, n, "{layout}");
        if layout == Layout::Fragmented {
            let g = tables
                .iter()
                .find(|t| t.place == "guard")
                .unwrap_or_else(|| panic!("{layout}: no table in a guard: {tables:?}"));
            let key = g.guard.clone().expect("a guard's key");
            assert!(tables
                .iter()
                .all(|t| (t.place == "guard") == t.guard.is_some()));
            // The text dump names the guard by its key, in hex with --hex.
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            let o = scree(&["dump", d, "--hex"]);
            assert!(
                stdout(&o).contains(&format!(", guard \"{hex}\": {}", g.file)),
                "{}",
                stdout(&o)
            );
        }
        if layout == Layout::Trie {
            assert!(tables.iter().all(|t| t.place.starts_with("container ")));
        }
        let o = scree(&["dump", d]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).starts_with(&format!(
            "keyspace \"ks\" ({layout}, id 1): {} files\n",
            tables.len()
        )));
        let described = stdout(&o)
            .lines()
            .filter(|l| l.starts_with("    ") && l.contains(" version "))
            .count();
        assert_eq!(described, tables.len(), "{layout}: {}", stdout(&o));
        // `check -v` describes every file the manifest names, through the same registry.
        let o = scree(&["check", d, "-v", "--no-lookups"]);
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
        for t in &tables {
            assert!(
                stdout(&o).contains(&format!("file {}: ", t.file)),
                "{layout}: {}: {}",
                t.file,
                stdout(&o)
            );
        }

        let o = scree(&["stats", d, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let s: scree::Stats = serde_json::from_str(&stdout(&o)).expect("stats json");
        let ks_stats = s.keyspaces.first().expect("one keyspace");
        let level_tables: u64 = ks_stats.levels.iter().map(|l| l.tables).sum();
        let data_tables = tables.iter().filter(|t| !t.file.ends_with(".bc")).count() as u64;
        assert_eq!(level_tables, data_tables, "{layout}");
        assert_eq!(ks_stats.memtable_bytes, 0, "{layout}: all flushed");
        let o = scree(&["stats", d]);
        assert!(stdout(&o).starts_with(&format!("keyspace \"ks\" ({layout}): ")));
        let o = scree(&["get", d, "ks", "key000042"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

        assert!(
            files(tmp.path()) == before,
            "{layout}: a read-only command changed a file"
        );
    }
}

#[test]
fn wal_prints_the_records_recovery_reads() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().to_str().expect("utf-8 path");
    let o = scree(&["put", d, "ks", "a", "1", "--create", "leveled"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (k, v) in [("b", "2"), ("c", "3")] {
        let o = scree(&["put", d, "ks", k, v]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let o = scree(&["delete", d, "ks", "a", "--sync"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // One process per write: each open flushes what the WALs before it held once they are
    // two, so they do not pile up.
    let wals: Vec<String> = files(tmp.path())
        .into_keys()
        .filter(|n| n.ends_with(".log"))
        .collect();
    assert!(wals.len() <= 2, "{wals:?}");

    let o = scree(&["wal", d, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let listed: Vec<&str> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|w| w["file"].as_str().expect("file"))
        .collect();
    assert_eq!(listed, wals);
    // The last write is the synced delete of `a`, in the newest WAL, as a type-3 record
    // (written after a completed sync) or type 2.
    let newest = v.as_array().and_then(|a| a.last()).expect("a WAL");
    assert_eq!(newest["end"], "clean");
    let last = newest["batches"]
        .as_array()
        .and_then(|b| b.last())
        .expect("a batch");
    let e = &last["entries"][0];
    assert_eq!(
        (e["put"].as_bool(), e["key"].as_str()),
        (Some(false), Some("a"))
    );
    assert_eq!(e["seq"], 4);
    assert_eq!(e["keyspace"], 1);
    let o = scree(&["wal", d, "--entries"]);
    assert!(
        stdout(&o).contains("  seq 4 ks 1 delete a\n"),
        "{}",
        stdout(&o)
    );
    let o = scree(&["dump", d]);
    assert!(
        stdout(&o).starts_with("keyspace \"ks\" (leveled, id 1): "),
        "{}",
        stdout(&o)
    );
    // A WAL that does not exist is an error naming it.
    let o = scree(&["wal", d, "999"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("000999.log"), "{}", stderr(&o));
}
