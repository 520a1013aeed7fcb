//! Writes the seed corpora of every fuzz target into `fuzz/corpus/<target>/` from a real
//! database built on the in-memory file system (every layout): WAL and manifest files and
//! records, table files of every registered format that names a fuzz target
//! (`scree::table_format`: sorted tables, HTables), blocks, Bloom filters, compact indexes.
//! Run from `fuzz/`: `cargo run --release --example make_corpus`.

use std::collections::HashMap;
use std::path::Path;

use scree::key::{make_ikey, ValueKind};
use scree::table::block::BlockBuilder;
use scree::testing::fault::FaultFs;
use scree::{Db, KeyspaceOptions, Layout, Options};

fn write(target: &str, name: &str, data: &[u8]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join(name), data).expect("write seed");
}

/// At most this many database files of a table format seed its target (every one when the
/// target is not listed): the database's HTables are one bucket each and much alike.
const TABLE_SEEDS: &[(&str, usize)] = &[("htable", 3)];

fn main() {
    let mut table_seeds: HashMap<&str, usize> = HashMap::new();
    for layout in Layout::implemented() {
        let fs = FaultFs::new(3);
        let mut o = Options::default();
        o.background_threads = 1;
        o.fs = Some(fs.as_dyn());
        {
            let db = Db::open("/db", o.clone()).expect("open");
            let mut ko = KeyspaceOptions::new(layout);
            ko.write_buffer_bytes = 64 * 1024;
            ko.block_size = 256;
            ko.trie.pile_size = 2;
            ko.trie.last_level_depth = 2;
            let ks = db.keyspace("seed", ko).expect("keyspace");
            for i in 0..300u32 {
                ks.put(
                    format!("key{i:05}"),
                    format!("value-{i}-{}", "x".repeat(i as usize % 40)),
                )
                .expect("put");
                if i % 11 == 0 {
                    ks.delete(format!("key{:05}", i / 2)).expect("delete");
                }
            }
            db.flush().expect("flush");
            db.compact().expect("compact");
            for i in 0..20u32 {
                ks.put(format!("late{i:03}"), b"v").expect("put");
            }
        }
        let name = layout.name();
        for p in fs.files() {
            let data = fs.file_bytes(&p).unwrap_or_default();
            let file = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("f")
                .to_string();
            let seed = format!("{name}-{file}");
            let ext = p.extension().and_then(|e| e.to_str());
            // A table file seeds the fuzz target its format names.
            let format = ext.and_then(scree::table_format::by_ext);
            if let Some(target) = format.and_then(|f| f.fuzz_target) {
                let cap = TABLE_SEEDS
                    .iter()
                    .find(|(t, _)| *t == target)
                    .map_or(usize::MAX, |&(_, n)| n);
                let n = table_seeds.entry(target).or_default();
                if *n < cap {
                    *n += 1;
                    write(target, &seed, &data);
                }
                continue;
            }
            match ext {
                Some("log") if !data.is_empty() => {
                    write("wal_records", &seed, &data);
                    let (recs, _) = scree::log::read_wal_records(&data);
                    for (i, (_, r)) in recs.iter().enumerate().take(4) {
                        write("batch_decode", &format!("{seed}-{i}"), r);
                    }
                }
                _ if file.starts_with("MANIFEST-") => {
                    write("wal_records", &seed, &data);
                    let (recs, _) = scree::log::read_records(&data);
                    for (i, r) in recs.iter().enumerate().take(4) {
                        write("manifest_edit", &format!("{seed}-{i}"), r);
                    }
                }
                _ => {}
            }
        }
    }
    // An HTable of three buckets with a fixed hash key (the database's tables above are one
    // bucket each): checks that span buckets, like the footer item count that overflowed a
    // multiplication only with two or more, need one to start from.
    let hk = [7u8; 16];
    let mut b = scree::htable::HTableBuilder::new(
        hk,
        scree::htable::HTableOptions {
            n_buckets: Some(3),
            ..Default::default()
        },
    );
    for i in 0..60u64 {
        let uk = format!("key{i:05}").into_bytes();
        let kind = if i % 9 == 4 {
            ValueKind::Delete
        } else {
            ValueKind::Put
        };
        let value = if kind == ValueKind::Put {
            format!("v{i}").into_bytes()
        } else {
            Vec::new()
        };
        b.add(
            scree::htable::placement_hash(&hk, &uk),
            make_ikey(&uk, i + 1, kind),
            value,
        )
        .expect("add");
    }
    write(
        "htable",
        "three-buckets.ht",
        &b.finish_to_vec().expect("htable").0,
    );
    // Blocks: a 12-byte probe, then a block of forty internal keys, as type 0 (keys whole)
    // and as type 1 (user key + tag, what tables write).
    for (name, mut b) in [
        ("forty-entries", BlockBuilder::new(4)),
        ("forty-entries-ikey", BlockBuilder::for_internal_keys(4)),
    ] {
        for i in 0..40u64 {
            b.add(
                &make_ikey(format!("key{i:04}").as_bytes(), 100 - i, ValueKind::Put),
                format!("v{i}").as_bytes(),
            );
        }
        let mut seed = b"key0007\0\0\0\0\0".to_vec();
        seed.extend(b.finish());
        write("block", name, &seed);
    }
    // Bloom: 8 bytes of hash, then a filter.
    let hashes: Vec<u64> = (0..100u32)
        .map(|i| scree::filter::bloom::bloom_hash(&i.to_le_bytes()))
        .collect();
    let mut seed = hashes[3].to_le_bytes().to_vec();
    seed.extend(scree::filter::bloom::encode(&hashes, 10));
    write("bloom", "hundred-keys", &seed);
    // Ops: a few byte strings (arbitrary turns any bytes into an operation sequence).
    for i in 0..4u8 {
        let s: Vec<u8> = (0..400u32)
            .map(|j| (j as u8).wrapping_mul(31).wrapping_add(i * 17))
            .collect();
        write("ops", &format!("bytes-{i}"), &s);
    }
    index_seeds();
    mlcf_seeds();
}

/// Multi-level cuckoo filters under the fuzz target's hash key: three sub-levels of
/// semisorted-style keys with rewrites (some conflicts in the secondary table), grown past one
/// segment; one with whole-key hashing; an empty one.
fn mlcf_seeds() {
    use scree::filter::cuckoo::{CuckooParams, KeyHashing, MultiLevelCuckoo, Prior};
    const HASH_KEY: [u8; 16] = *b"scree-fuzz-mlcf!";
    let key = |i: u64| -> Vec<u8> {
        let mut k = (i / 16).to_be_bytes().to_vec();
        k.extend_from_slice(&i.to_be_bytes());
        k
    };
    let mut p = CuckooParams::for_level(200, 3);
    p.fingerprint_bits = 8;
    let mut f =
        MultiLevelCuckoo::with_hashing(HASH_KEY, KeyHashing::Split(8), p.clone()).expect("params");
    for sub in 0..3u8 {
        for i in 0..300u64 {
            f.insert(&key(i * 3 + u64::from(sub) % 2), sub, Prior::Unknown)
                .expect("insert");
        }
    }
    write("mlcf_decode", "three-sub-levels", &f.encode());
    let mut w =
        MultiLevelCuckoo::with_hashing(HASH_KEY, KeyHashing::Whole, p.clone()).expect("params");
    for i in 0..50u64 {
        w.insert(&key(i), 0, Prior::Absent).expect("insert");
    }
    write("mlcf_decode", "whole-keys", &w.encode());
    let e = MultiLevelCuckoo::with_hashing(HASH_KEY, KeyHashing::Split(8), p).expect("params");
    write("mlcf_decode", "empty", &e.encode());
}

/// Compact three-level indexes: groups of 1–6 entries, 5 to a block, with versions of one key
/// straddling a boundary; one group over four blocks; an empty table.
fn index_seeds() {
    use scree::index::IndexBuilder;
    let mut b = IndexBuilder::with_bucket_keys(4);
    let mut entries = Vec::new();
    for g in 0..40u64 {
        let p = g.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for j in 0..(g % 6 + 1) {
            entries.push((p, j.wrapping_mul(0xD6E8_FEB8_6659_FD93)));
        }
    }
    entries.push(entries[7]);
    entries.push(entries[7]);
    entries.sort_unstable();
    for (i, &(p, s)) in entries.iter().enumerate() {
        b.add(p, s, (i / 5) as u32).expect("in order");
    }
    write("index_decode", "forty-groups", &b.finish().expect("index"));
    let mut b = IndexBuilder::new();
    for i in 0..12u32 {
        b.add(7, u64::from(i) << 60, i / 3).expect("in order");
    }
    write("index_decode", "one-group", &b.finish().expect("index"));
    let empty = IndexBuilder::new().finish().expect("index");
    write("index_decode", "empty", &empty);
    semisorted_seed();
}

/// A semi-sorted table with all three entry kinds (inline, value in the blob area, key and
/// value in the blob area) over several 256-byte blocks and groups: the database's tables above
/// hold only small inline entries.
fn semisorted_seed() {
    use scree::layout::semisorted::table::{hashes, SemiKey, SemiTableBuilder};
    let fs = FaultFs::new(5);
    let env = scree::fs::Env::plain(fs.as_dyn());
    let path = Path::new("/t/000001.sem");
    fs.as_dyn().create_dir_all(Path::new("/t")).expect("mkdir");
    let w = env
        .create(path, scree::stats::WriteCause::Flush)
        .expect("create");
    let hk = [7u8; 16];
    let mut entries: Vec<(u64, u64, Vec<u8>, Vec<u8>)> = (0..60u64)
        .map(|i| {
            let mut uk = format!("g{:07}s{i:04}", i % 5).into_bytes();
            if i == 17 {
                uk.resize(300, b'k');
            }
            let value = if i % 13 == 3 {
                vec![b'v'; 200]
            } else {
                format!("v{i}").into_bytes()
            };
            let kind = if i % 11 == 4 {
                ValueKind::Delete
            } else {
                ValueKind::Put
            };
            let (ph, sh) = hashes(&hk, 8, &uk);
            (ph, sh, make_ikey(&uk, i + 1, kind), value)
        })
        .collect();
    entries.sort_by(|a, b| {
        let (ka, kb) = (scree::key::parse(&a.2), scree::key::parse(&b.2));
        let x = SemiKey {
            ph: a.0,
            sh: a.1,
            user_key: ka.user_key,
            trailer: ka.trailer(),
        };
        let y = SemiKey {
            ph: b.0,
            sh: b.1,
            user_key: kb.user_key,
            trailer: kb.trailer(),
        };
        x.order(&y)
    });
    let mut b = SemiTableBuilder::new(w, 1, 256, hk);
    for (ph, sh, ik, v) in &entries {
        b.add(*ph, *sh, ik, v).expect("add");
    }
    b.finish().expect("finish");
    write(
        "semisorted_table",
        "three-entry-kinds.sem",
        &fs.file_bytes(path).expect("bytes"),
    );
}
