//! The inspection commands: `get`, `scan`, `stats` and `dump` open a database read-only
//! (`Options::read_only`: nothing on disk changes); `put` and `delete` open it as an
//! application would. Keys and values are taken and printed as text with non-printable bytes
//! escaped (`\xNN`, as Rust's `escape_ascii`), or as hex with `--hex`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use scree::{Db, Keyspace, KeyspaceOptions, Layout, Options, WriteOptions};

/// A key and its value.
type Entry = (Vec<u8>, Vec<u8>);

/// How keys and values are read from the command line and printed.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Encoding {
    /// Keys and values are hex, on input and output (`6b6579` for `key`).
    #[arg(long)]
    pub hex: bool,
}

impl Encoding {
    fn parse(self, what: &str, s: &str) -> anyhow::Result<Vec<u8>> {
        if !self.hex {
            return Ok(s.as_bytes().to_vec());
        }
        let bytes = s.as_bytes();
        if !bytes.len().is_multiple_of(2) {
            bail!("{what} {s:?} is not hex: odd number of digits");
        }
        // Digits only: `from_str_radix` alone also takes a sign (`+f` read as 0x0f; found in
        // review).
        if let Some(c) = s.chars().find(|c| !c.is_ascii_hexdigit()) {
            bail!("{what} {s:?} is not hex: {c:?}");
        }
        bytes
            .chunks(2)
            .map(|pair| {
                std::str::from_utf8(pair)
                    .ok()
                    .and_then(|p| u8::from_str_radix(p, 16).ok())
                    .with_context(|| format!("{what} {s:?} is not hex"))
            })
            .collect()
    }

    fn show(self, b: &[u8]) -> String {
        if self.hex {
            b.iter().map(|x| format!("{x:02x}")).collect()
        } else {
            b.escape_ascii().to_string()
        }
    }
}

/// The database and keyspace a command works on.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// The database directory.
    pub dir: PathBuf,
    /// The keyspace.
    pub keyspace: String,
}

/// Arguments of `scree get`.
#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    #[command(flatten)]
    enc: Encoding,
}

/// Arguments of `scree put`.
#[derive(clap::Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    /// The value.
    value: String,
    /// Create the keyspace with this layout if it does not exist (and the database, if the
    /// directory holds none). Without it, a missing keyspace or database is an error.
    #[arg(long)]
    create: Option<Layout>,
    /// Sync the WAL before returning (the write survives a power loss).
    #[arg(long)]
    sync: bool,
    #[command(flatten)]
    enc: Encoding,
}

/// Arguments of `scree delete`.
#[derive(clap::Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    /// Sync the WAL before returning.
    #[arg(long)]
    sync: bool,
    #[command(flatten)]
    enc: Encoding,
}

/// Arguments of `scree scan`.
#[derive(clap::Args, Debug)]
pub struct ScanArgs {
    #[command(flatten)]
    target: Target,
    /// First key (inclusive).
    #[arg(long)]
    from: Option<String>,
    /// End key (exclusive).
    #[arg(long)]
    to: Option<String>,
    /// Only keys starting with this (with --from/--to: both apply).
    #[arg(long)]
    prefix: Option<String>,
    /// Largest key first.
    #[arg(long)]
    reverse: bool,
    /// Print at most this many entries.
    #[arg(long)]
    limit: Option<u64>,
    /// Print keys only.
    #[arg(long)]
    keys_only: bool,
    #[command(flatten)]
    enc: Encoding,
}

/// Arguments of `scree stats`.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// The database directory.
    dir: PathBuf,
    /// Print `Db::stats()` as JSON (every field; the I/O counters cover only the open).
    #[arg(long)]
    json: bool,
}

/// Arguments of `scree dump`.
#[derive(clap::Args, Debug)]
pub struct DumpArgs {
    /// The database directory.
    dir: PathBuf,
    /// Only this keyspace.
    #[arg(long)]
    keyspace: Option<String>,
    /// Print JSON: one object per keyspace with its layout and tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    enc: Encoding,
}

fn open_read_only(dir: &Path) -> anyhow::Result<Db> {
    let opts = Options {
        read_only: true,
        ..Options::default()
    };
    Db::open(dir, opts).with_context(|| format!("cannot open {} read-only", dir.display()))
}

fn open_keyspace(db: &Db, name: &str) -> anyhow::Result<Keyspace> {
    Ok(db.existing_keyspace(name)?)
}

/// `scree get`: prints the value; `Ok(false)` (exit 1) when the key has none.
pub fn get(args: GetArgs) -> anyhow::Result<bool> {
    let key = args.enc.parse("key", &args.key)?;
    let db = open_read_only(&args.target.dir)?;
    let ks = open_keyspace(&db, &args.target.keyspace)?;
    match ks.get(&key)? {
        Some(v) => {
            println!("{}", args.enc.show(&v));
            Ok(true)
        }
        None => {
            eprintln!("not found: {}", args.enc.show(&key));
            Ok(false)
        }
    }
}

/// `scree put`.
pub fn put(args: PutArgs) -> anyhow::Result<bool> {
    let key = args.enc.parse("key", &args.key)?;
    let value = args.enc.parse("value", &args.value)?;
    let opts = Options {
        create_if_missing: args.create.is_some(),
        ..Options::default()
    };
    let db = Db::open(&args.target.dir, opts)?;
    let ks = match args.create {
        Some(layout) => db.keyspace(&args.target.keyspace, KeyspaceOptions::new(layout))?,
        None => open_keyspace(&db, &args.target.keyspace)?,
    };
    ks.put_opt(&key, &value, &WriteOptions { sync: args.sync })?;
    Ok(true)
}

/// `scree delete`.
pub fn delete(args: DeleteArgs) -> anyhow::Result<bool> {
    let key = args.enc.parse("key", &args.key)?;
    let opts = Options {
        create_if_missing: false,
        ..Options::default()
    };
    let db = Db::open(&args.target.dir, opts)?;
    let ks = open_keyspace(&db, &args.target.keyspace)?;
    ks.delete_opt(&key, &WriteOptions { sync: args.sync })?;
    Ok(true)
}

/// `scree scan`: one `key ==> value` line per entry, in key order.
pub fn scan(args: ScanArgs) -> anyhow::Result<bool> {
    let enc = args.enc;
    let from = args
        .from
        .as_deref()
        .map(|s| enc.parse("--from", s))
        .transpose()?;
    let to = args
        .to
        .as_deref()
        .map(|s| enc.parse("--to", s))
        .transpose()?;
    let prefix = args
        .prefix
        .as_deref()
        .map(|s| enc.parse("--prefix", s))
        .transpose()?;
    let db = open_read_only(&args.target.dir)?;
    let ks = open_keyspace(&db, &args.target.keyspace)?;
    let iter = match (&prefix, &from, &to) {
        (Some(p), None, None) => ks.prefix(p),
        _ => {
            use std::ops::Bound;
            // With a prefix too, the range is narrowed to the prefix's keys, so that the scan
            // does not walk the rest of the keyspace.
            let mut lo = from.clone();
            let mut hi = to.clone();
            if let Some(p) = &prefix {
                if lo.as_ref().is_none_or(|l| l < p) {
                    lo = Some(p.clone());
                }
                if let Some(end) = prefix_end(p) {
                    if hi.as_ref().is_none_or(|h| *h > end) {
                        hi = Some(end);
                    }
                }
            }
            let lo = lo.map_or(Bound::Unbounded, Bound::Included);
            let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
            ks.range::<Vec<u8>, _>((lo, hi))
        }
    };
    let iter: Box<dyn Iterator<Item = scree::Result<Entry>>> = if args.reverse {
        Box::new(iter.rev())
    } else {
        Box::new(iter)
    };
    let limit = args.limit.unwrap_or(u64::MAX);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut shown = 0u64;
    for item in iter {
        if shown >= limit {
            break;
        }
        let (k, v) = item?;
        if prefix.as_ref().is_some_and(|p| !k.starts_with(p)) {
            continue;
        }
        if args.keys_only {
            writeln!(out, "{}", enc.show(&k))?;
        } else {
            writeln!(out, "{} ==> {}", enc.show(&k), enc.show(&v))?;
        }
        shown += 1;
    }
    out.flush()?;
    Ok(true)
}

/// The smallest key above every key starting with `p`; `None` when there is none (`p` is
/// empty or all 0xff bytes).
fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let last = p.iter().rposition(|&b| b != 0xff)?;
    let mut end = p.get(..=last)?.to_vec();
    if let Some(b) = end.last_mut() {
        *b += 1;
    }
    Some(end)
}

/// `scree stats`: each keyspace's levels and memtable, or the whole `Stats` as JSON.
pub fn stats(args: StatsArgs) -> anyhow::Result<bool> {
    let db = open_read_only(&args.dir)?;
    let s = db.stats();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(true);
    }
    for ks in &s.keyspaces {
        let tables: u64 = ks.levels.iter().map(|l| l.tables).sum();
        let bytes: u64 = ks.levels.iter().map(|l| l.bytes).sum();
        println!(
            "keyspace {:?} ({}): {tables} tables, {bytes} bytes; {} bytes in memtables (replayed from the WAL)",
            ks.name, ks.layout, ks.memtable_bytes
        );
        for l in &ks.levels {
            println!(
                "  level {}: {} tables, {} bytes{}{}",
                l.level,
                l.tables,
                l.bytes,
                if l.detail.is_empty() { "" } else { "; " },
                l.detail
            );
        }
    }
    println!("last sequence number: {}", db.snapshot().sequence());
    Ok(true)
}

/// A table file as its format describes it (`scree::table_format`), as JSON: the format's
/// version, size and facts, or the error reading it.
fn describe_json(d: &scree::Result<scree::table_format::Description>) -> serde_json::Value {
    match d {
        Ok(d) => {
            let mut m = serde_json::Map::new();
            m.insert("version".into(), d.version.into());
            m.insert("size".into(), d.size.into());
            for (name, value) in &d.facts {
                m.insert((*name).into(), (*value).into());
            }
            serde_json::Value::Object(m)
        }
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

/// `scree dump`: every keyspace's live files, level by level, with key and sequence ranges,
/// and each file as its format describes it (read from its footer and metadata).
pub fn dump(args: DumpArgs) -> anyhow::Result<bool> {
    let db = open_read_only(&args.dir)?;
    let fs: std::sync::Arc<dyn scree::fs::FileSystem> =
        std::sync::Arc::new(scree::fs::std_fs::StdFs);
    let describe = |file: &str| scree::table_format::describe(fs.clone(), &args.dir.join(file));
    let format_name = |file: &str| {
        let ext = file.rsplit_once('.').map_or("", |(_, e)| e);
        scree::table_format::by_ext(ext).map(|f| f.name)
    };
    let names = match &args.keyspace {
        Some(k) => vec![k.clone()],
        None => db.keyspace_names(),
    };
    let enc = args.enc;
    let mut json = Vec::new();
    for name in names {
        let ks = open_keyspace(&db, &name)?;
        let tables = ks.tables();
        if args.json {
            json.push(serde_json::json!({
                "keyspace": name,
                "id": ks.id(),
                "layout": ks.layout().name(),
                "tables": tables.iter().map(|t| serde_json::json!({
                    "file": t.file,
                    "format": format_name(&t.file),
                    "describe": describe_json(&describe(&t.file)),
                    "level": t.level,
                    "place": t.place,
                    "guard": t.guard.as_ref().map(|g| enc.show(g)),
                    "size": t.size,
                    "entries": t.entries,
                    "smallest_key": enc.show(&t.smallest_key),
                    "largest_key": enc.show(&t.largest_key),
                    "min_seq": t.min_seq,
                    "max_seq": t.max_seq,
                    "dead_bytes": t.dead_bytes,
                })).collect::<Vec<_>>(),
            }));
            continue;
        }
        println!(
            "keyspace {name:?} ({}, id {}): {} files",
            ks.layout(),
            ks.id(),
            tables.len()
        );
        for t in &tables {
            let place = match &t.guard {
                Some(g) => format!(", {} \"{}\"", t.place, enc.show(g)),
                None if t.place.is_empty() => String::new(),
                None => format!(", {}", t.place),
            };
            // An appendable table's bytes its current metadata no longer references.
            let dead = match t.dead_bytes {
                0 => String::new(),
                n => format!(" ({n} dead)"),
            };
            println!(
                "  level {}{place}: {} {} bytes{dead}, {} entries, keys [{} .. {}], seq {}..{}",
                t.level,
                t.file,
                t.size,
                t.entries,
                enc.show(&t.smallest_key),
                enc.show(&t.largest_key),
                t.min_seq,
                t.max_seq
            );
            match describe(&t.file) {
                Ok(d) => println!("    {d}"),
                Err(e) => println!("    cannot describe {}: {e}", t.file),
            }
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    }
    Ok(true)
}

/// Arguments of `scree wal`.
#[derive(clap::Args, Debug)]
pub struct WalArgs {
    /// The database directory.
    dir: PathBuf,
    /// Only these WAL files (by number, e.g. 12 for 000012.log); default every one.
    numbers: Vec<u64>,
    /// Print every entry: sequence number, keyspace id (`scree dump` shows the ids), put or
    /// delete, key and value.
    #[arg(long)]
    entries: bool,
    /// Print JSON (entries included).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    enc: Encoding,
}

/// `scree wal`: each WAL's records as recovery reads them (`ldb dump_wal`). Reads the files
/// only; whether recovery replays a WAL (its keyspaces' log numbers, the chain of seals) is
/// `scree check`'s to say.
pub fn wal(args: WalArgs) -> anyhow::Result<bool> {
    let fs: std::sync::Arc<dyn scree::fs::FileSystem> =
        std::sync::Arc::new(scree::fs::std_fs::StdFs);
    let mut numbers: Vec<u64> = if args.numbers.is_empty() {
        std::fs::read_dir(&args.dir)
            .with_context(|| format!("cannot list {}", args.dir.display()))?
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                let (num, ext) = name.split_once('.')?;
                (ext == "log").then(|| num.parse().ok()).flatten()
            })
            .collect()
    } else {
        args.numbers.clone()
    };
    numbers.sort_unstable();
    let enc = args.enc;
    let mut json = Vec::new();
    for n in numbers {
        let path = args.dir.join(format!("{n:06}.log"));
        let d = scree::inspect::read_wal(fs.clone(), &path)?;
        if args.json {
            json.push(wal_json(n, &d, enc));
            continue;
        }
        let entries: usize = d
            .batches
            .iter()
            .map(|b| b.entries.as_ref().map_or(0, Vec::len))
            .sum();
        let (lo, hi) = d
            .batches
            .iter()
            .filter_map(|b| b.entries.as_ref().ok())
            .flatten()
            .fold((u64::MAX, 0), |(lo, hi), e| (lo.min(e.seq), hi.max(e.seq)));
        let seq_range = if entries == 0 {
            "no entries".to_string()
        } else {
            format!("seq {lo}..{hi}")
        };
        let seal = d.seal.map_or("no seal".to_string(), |s| {
            format!("sealed, next {s:06}.log")
        });
        println!(
            "{n:06}.log: {} bytes, {} batches, {entries} entries, {seq_range}, {seal}{}, {}",
            d.size,
            d.batches.len(),
            if d.synced { ", synced" } else { "" },
            d.end
        );
        for b in &d.batches {
            match &b.entries {
                Err(e) => println!("  batch at {}: does not decode: {e}", b.offset),
                Ok(es) if args.entries => {
                    for e in es {
                        if e.put {
                            println!(
                                "  seq {} ks {} put {} ==> {}",
                                e.seq,
                                e.keyspace,
                                enc.show(&e.key),
                                enc.show(&e.value)
                            );
                        } else {
                            println!(
                                "  seq {} ks {} delete {}",
                                e.seq,
                                e.keyspace,
                                enc.show(&e.key)
                            );
                        }
                    }
                }
                Ok(_) => {}
            }
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    }
    Ok(true)
}

/// One WAL as JSON, entries included.
fn wal_json(n: u64, d: &scree::inspect::WalDump, enc: Encoding) -> serde_json::Value {
    let batches: Vec<serde_json::Value> = d
        .batches
        .iter()
        .map(|b| {
            let entries = match &b.entries {
                Ok(es) => serde_json::json!(es
                    .iter()
                    .map(|e| serde_json::json!({
                        "seq": e.seq,
                        "keyspace": e.keyspace,
                        "put": e.put,
                        "key": enc.show(&e.key),
                        "value": enc.show(&e.value),
                    }))
                    .collect::<Vec<_>>()),
                Err(d) => serde_json::json!({ "error": d }),
            };
            serde_json::json!({
                "offset": b.offset,
                "record_type": b.record_type,
                "entries": entries,
            })
        })
        .collect();
    serde_json::json!({
        "file": format!("{n:06}.log"),
        "size": d.size,
        "seal": d.seal,
        "synced": d.synced,
        "valid_end": d.valid_end,
        "end": d.end,
        "batches": batches,
    })
}
