//! Command dispatch: argument checking with Redis's arity and error texts, and each command's
//! reply built from the [`Store`](crate::store::Store)'s operations.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use subtle::ConstantTimeEq;

use crate::glob;
use crate::resp::{parse_i64, Reply};
use crate::store::{
    now_ms, CmdError, Cond, ExpireCond, Kind, Res, ScoreBound, Store, Ttl, ZaddFlags,
};
use crate::{Config, Fsync};

/// The version INFO and HELLO report as `redis_version`: the Redis release whose commands and
/// replies these follow (clients check it; `scree_version` is Scree's own).
pub const REDIS_VERSION: &str = "7.0.0";

/// Most SCAN cursors kept; the oldest are forgotten first (an unknown cursor is an error).
const MAX_CURSORS: usize = 65_536;

/// What every connection shares.
pub struct Shared {
    /// The data.
    pub store: Store,
    /// The settings.
    pub config: Config,
    /// The port the listener got.
    pub port: u16,
    /// Connected clients.
    pub clients: AtomicUsize,
    /// Next client id.
    pub next_id: AtomicU64,
    /// Connections accepted since start.
    pub connections: AtomicU64,
    /// Connections refused (`maxclients`).
    pub rejected: AtomicU64,
    /// Commands run.
    pub commands: AtomicU64,
    /// Writes since the last WAL sync (`everysec` syncs only when some happened).
    pub unsynced: AtomicU64,
    /// When the server started.
    pub started: Instant,
    cursors: Mutex<Cursors>,
}

struct Cursors {
    next: u64,
    map: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl Shared {
    /// The shared state of a server.
    pub fn new(store: Store, config: Config, port: u16) -> Shared {
        // Cursors of an earlier process are not mistaken for this one's.
        let seed = (now_ms() & 0xffff_ffff) << 16 | 1;
        Shared {
            store,
            config,
            port,
            clients: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            connections: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            unsynced: AtomicU64::new(0),
            started: Instant::now(),
            cursors: Mutex::new(Cursors {
                next: seed,
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    fn save_cursor(&self, key: Vec<u8>) -> u64 {
        let mut c = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
        let id = c.next;
        c.next = c.next.wrapping_add(1).max(1);
        c.map.insert(id, key);
        c.order.push_back(id);
        while c.order.len() > MAX_CURSORS {
            if let Some(old) = c.order.pop_front() {
                c.map.remove(&old);
            }
        }
        id
    }

    fn cursor(&self, id: u64) -> Option<Vec<u8>> {
        let c = self.cursors.lock().unwrap_or_else(|p| p.into_inner());
        c.map.get(&id).cloned()
    }

    fn password_ok(&self, given: &[u8]) -> bool {
        match &self.config.requirepass {
            None => true,
            Some(real) => constant_time_eq(real.as_bytes(), given),
        }
    }
}

/// Whether `given` equals `real`, in time that depends on `real`'s length only (the loop runs
/// over `real`, and the length check is folded in without a branch).
pub fn constant_time_eq(real: &[u8], given: &[u8]) -> bool {
    let mut same = (real.len() as u64).ct_eq(&(given.len() as u64));
    for (i, r) in real.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!*r);
        same &= r.ct_eq(&g);
    }
    same.into()
}

/// One connection's state.
pub struct Conn {
    /// Client id.
    pub id: u64,
    /// Protocol version (2 or 3).
    pub proto: u8,
    /// Whether it may run commands (no password, or AUTH done).
    pub authed: bool,
    /// `CLIENT SETNAME`.
    pub name: Option<Vec<u8>>,
    /// Peer address.
    pub addr: String,
    /// Local address.
    pub laddr: String,
    /// Connected at.
    pub since: Instant,
    /// Last command at.
    pub last: Instant,
    /// The last command's name.
    pub last_cmd: String,
    /// Close after the replies so far.
    pub quit: bool,
    /// Whether a write ran since the last WAL sync of this connection's replies.
    pub wrote: bool,
}

impl Conn {
    /// A new connection.
    pub fn new(id: u64, addr: String, laddr: String, authed: bool) -> Conn {
        let now = Instant::now();
        Conn {
            id,
            proto: 2,
            authed,
            name: None,
            addr,
            laddr,
            since: now,
            last: now,
            last_cmd: String::new(),
            quit: false,
            wrote: false,
        }
    }
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn arity_err(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

fn syntax() -> CmdError {
    CmdError::err("syntax error")
}

fn not_int() -> CmdError {
    CmdError::err("value is not an integer or out of range")
}

fn int(b: &[u8]) -> Res<i64> {
    parse_i64(b).ok_or_else(not_int)
}

/// A score as Redis's `strtod`-based parser takes it (no NaN, no blanks).
fn float(b: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(b).ok()?;
    if t.is_empty() || t.starts_with(char::is_whitespace) || t.ends_with(char::is_whitespace) {
        return None;
    }
    let v: f64 = match t.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => t.parse().ok()?,
    };
    (!v.is_nan()).then_some(v)
}

fn score_bound(b: &[u8]) -> Res<ScoreBound> {
    let bad = || CmdError::err("min or max is not a float");
    let (exclusive, num) = match b.strip_prefix(b"(") {
        Some(r) => (true, r),
        None => (false, b),
    };
    Ok(ScoreBound {
        value: float(num).ok_or_else(bad)?,
        exclusive,
    })
}

/// Arity as Redis gives it: `n` exactly n arguments (with the name), `-n` at least n.
fn arity(name: &str) -> Option<i32> {
    Some(match name {
        "ping" | "hello" | "quit" | "info" | "command" | "flushdb" | "flushall" => -1,
        "dbsize" | "save" | "reset" => 1,
        "echo" | "select" | "get" | "incr" | "decr" | "strlen" | "getdel" | "ttl" | "pttl"
        | "persist" | "type" | "hgetall" | "hlen" | "zcard" => 2,
        "auth" | "client" | "config" | "mget" | "del" | "unlink" | "exists" | "scan" => -2,
        "setnx" | "incrby" | "decrby" | "append" | "hget" | "hexists" | "zscore" => 3,
        "set" | "mset" | "expire" | "pexpire" | "expireat" | "pexpireat" | "hmget" | "hdel"
        | "zrem" => -3,
        "hset" | "hmset" | "zadd" | "zrange" | "zrangebyscore" | "zrevrange"
        | "zrevrangebyscore" => -4,
        "hincrby" => 4,
        _ => return None,
    })
}

/// Every command, for `COMMAND COUNT/INFO`.
const COMMANDS: &[&str] = &[
    "ping",
    "echo",
    "quit",
    "select",
    "auth",
    "hello",
    "client",
    "reset",
    "get",
    "set",
    "setnx",
    "mget",
    "mset",
    "del",
    "unlink",
    "exists",
    "incr",
    "incrby",
    "decr",
    "decrby",
    "append",
    "strlen",
    "getdel",
    "expire",
    "pexpire",
    "expireat",
    "pexpireat",
    "ttl",
    "pttl",
    "persist",
    "hset",
    "hget",
    "hmget",
    "hmset",
    "hgetall",
    "hdel",
    "hexists",
    "hlen",
    "hincrby",
    "zadd",
    "zrem",
    "zscore",
    "zcard",
    "zrange",
    "zrangebyscore",
    "scan",
    "type",
    "dbsize",
    "info",
    "config",
    "command",
    "flushdb",
    "flushall",
    "save",
];

/// Commands that change data (the WAL is synced before their replies with `always`).
fn writes(name: &str) -> bool {
    matches!(
        name,
        "set"
            | "setnx"
            | "mset"
            | "del"
            | "unlink"
            | "incr"
            | "incrby"
            | "decr"
            | "decrby"
            | "append"
            | "getdel"
            | "expire"
            | "pexpire"
            | "expireat"
            | "pexpireat"
            | "persist"
            | "hset"
            | "hmset"
            | "hdel"
            | "hincrby"
            | "zadd"
            | "zrem"
            | "flushdb"
            | "flushall"
    )
}

/// Runs one command.
pub fn exec(sh: &Shared, c: &mut Conn, args: &[&[u8]]) -> Reply {
    let Some((name_b, rest)) = args.split_first() else {
        return Reply::err("empty command");
    };
    // One allocation for the name (a GET's whole server-side cost is a few allocations).
    let mut name = s(name_b);
    name.make_ascii_lowercase();
    count_commands(sh, c, 1);
    let Some(a) = arity(&name) else {
        let mut tail = String::new();
        for x in rest {
            if tail.len() >= 128 {
                break;
            }
            let room = 128 - tail.len();
            let t = s(x);
            let t: String = t.chars().take(room).collect();
            tail.push_str(&format!("'{t}' "));
        }
        let shown: String = s(name_b).chars().take(128).collect();
        return Reply::err(format!(
            "unknown command '{shown}', with args beginning with: {tail}"
        ));
    };
    if (a > 0 && args.len() != a as usize) || (a < 0 && args.len() < a.unsigned_abs() as usize) {
        return arity_err(&name);
    }
    if !c.authed && !matches!(name.as_str(), "auth" | "hello" | "quit" | "reset") {
        return Reply::Error("NOAUTH Authentication required.".into());
    }
    if c.last_cmd != name {
        c.last_cmd.clone_from(&name);
    }
    if writes(&name) {
        mark_writes(sh, c, 1);
    }
    match run(sh, c, &name, rest) {
        Ok(r) => r,
        Err(e) => e.reply(),
    }
}

/// Counts `n` commands received on `c`: INFO's total and the client's idle clock.
fn count_commands(sh: &Shared, c: &mut Conn, n: u64) {
    sh.commands.fetch_add(n, Ordering::Relaxed);
    c.last = Instant::now();
}

/// Notes `n` writes on `c`: its replies wait for the WAL sync `--appendfsync` asks, and the
/// writes count as unsynced until then.
fn mark_writes(sh: &Shared, c: &mut Conn, n: u64) {
    c.wrote = true;
    sh.unsynced.fetch_add(n, Ordering::Relaxed);
}

/// Whether `args` is a plain `SET key value` (no options) that [`exec_sets`] may run with
/// its neighbours: on a connection that may run commands.
pub fn is_plain_set(c: &Conn, args: &[&[u8]]) -> bool {
    c.authed && args.len() == 3 && args.first().is_some_and(|n| n.eq_ignore_ascii_case(b"set"))
}

/// Runs a run of consecutive plain `SET key value` commands of one pipeline (each
/// [`is_plain_set`]) as one write: the pairs go into one batch, as `MSET` writes them (the
/// last value of a key given twice wins, as in sequence), so the run costs one trip through
/// the engine's write group instead of one per `SET`. The reply is each `SET`'s: `+OK`, or the
/// error of the write, which then applied none of them. Counted as that many commands.
pub fn exec_sets(sh: &Shared, c: &mut Conn, pairs: &[(&[u8], &[u8])]) -> Reply {
    let n = pairs.len() as u64;
    count_commands(sh, c, n);
    if c.last_cmd != "set" {
        c.last_cmd = "set".to_string();
    }
    mark_writes(sh, c, n);
    match sh.store.mset(pairs) {
        Ok(()) => Reply::OK,
        Err(e) => e.reply(),
    }
}

fn bulk_or_nil(v: Option<Vec<u8>>) -> Reply {
    v.map_or(Reply::Nil, Reply::Bulk)
}

fn run(sh: &Shared, c: &mut Conn, name: &str, a: &[&[u8]]) -> Res<Reply> {
    let st = &sh.store;
    let arg = |i: usize| a.get(i).copied().unwrap_or_default();
    Ok(match name {
        // ---- connection ----
        "ping" => match a {
            [] => Reply::Simple("PONG"),
            [m] => Reply::bulk(m),
            _ => return Ok(arity_err(name)),
        },
        "echo" => Reply::bulk(arg(0)),
        "quit" => {
            c.quit = true;
            Reply::OK
        }
        "select" => match parse_i64(arg(0)) {
            Some(0) => Reply::OK,
            Some(_) => Reply::err("DB index is out of range"),
            None => return Err(not_int()),
        },
        "auth" => match a {
            [p] => auth(sh, c, None, p)?,
            [u, p] => auth(sh, c, Some(u), p)?,
            _ => return Err(syntax()),
        },
        "hello" => hello(sh, c, a)?,
        "client" => client(sh, c, a)?,
        "reset" => {
            c.proto = 2;
            c.name = None;
            c.authed = sh.config.requirepass.is_none();
            Reply::Simple("RESET")
        }
        // ---- strings ----
        "get" => bulk_or_nil(st.get(arg(0))?),
        "set" => set(st, a)?,
        "setnx" => {
            let (done, _) = st.set(arg(0), arg(1), Cond::Absent, Ttl::Clear, false)?;
            Reply::Int(i64::from(done))
        }
        "mget" => Reply::Array(st.mget(a)?.into_iter().map(bulk_or_nil).collect()),
        "mset" => {
            if !a.len().is_multiple_of(2) {
                return Ok(arity_err(name));
            }
            let pairs: Vec<(&[u8], &[u8])> = a.chunks_exact(2).map(pair).collect();
            st.mset(&pairs)?;
            Reply::OK
        }
        "del" | "unlink" => Reply::Int(st.del(a)?),
        "exists" => Reply::Int(st.exists(a)?),
        "incr" => Reply::Int(st.incr_by(arg(0), 1)?),
        "decr" => Reply::Int(st.incr_by(arg(0), -1)?),
        "incrby" => Reply::Int(st.incr_by(arg(0), int(arg(1))?)?),
        "decrby" => {
            let d = int(arg(1))?;
            let d = d
                .checked_neg()
                .ok_or_else(|| CmdError::err("decrement would overflow"))?;
            Reply::Int(st.incr_by(arg(0), d)?)
        }
        "append" => Reply::Int(st.append(arg(0), arg(1))?),
        "strlen" => Reply::Int(st.get(arg(0))?.map_or(0, |v| v.len() as i64)),
        "getdel" => bulk_or_nil(st.getdel(arg(0))?),
        // ---- expiry ----
        "expire" | "pexpire" | "expireat" | "pexpireat" => expire(st, name, a)?,
        "ttl" => Reply::Int(match st.pttl(arg(0))? {
            t if t < 0 => t,
            t => (t + 500) / 1000,
        }),
        "pttl" => Reply::Int(st.pttl(arg(0))?),
        "persist" => Reply::Int(i64::from(st.persist(arg(0))?)),
        // ---- hashes ----
        "hset" | "hmset" => {
            let fv = a.get(1..).unwrap_or_default();
            if !fv.len().is_multiple_of(2) {
                return Ok(arity_err(name));
            }
            let pairs: Vec<(&[u8], &[u8])> = fv.chunks_exact(2).map(pair).collect();
            let n = st.hset(arg(0), &pairs)?;
            if name == "hset" {
                Reply::Int(n)
            } else {
                Reply::OK
            }
        }
        "hget" => bulk_or_nil(st.hget(arg(0), arg(1))?),
        "hmget" => Reply::Array(
            st.hmget(arg(0), a.get(1..).unwrap_or_default())?
                .into_iter()
                .map(bulk_or_nil)
                .collect(),
        ),
        "hgetall" => Reply::Map(
            st.hgetall(arg(0))?
                .into_iter()
                .map(|(f, v)| (Reply::Bulk(f), Reply::Bulk(v)))
                .collect(),
        ),
        "hdel" => Reply::Int(st.hdel(arg(0), a.get(1..).unwrap_or_default())?),
        "hexists" => Reply::Int(i64::from(st.hget(arg(0), arg(1))?.is_some())),
        "hlen" => Reply::Int(st.hlen(arg(0))?),
        "hincrby" => Reply::Int(st.hincrby(arg(0), arg(1), int(arg(2))?)?),
        // ---- sorted sets ----
        "zadd" => zadd(st, a)?,
        "zrem" => Reply::Int(st.zrem(arg(0), a.get(1..).unwrap_or_default())?),
        "zscore" => match st.zscore(arg(0), arg(1))? {
            Some(x) => Reply::Double(x),
            None => Reply::Nil,
        },
        "zcard" => Reply::Int(st.zcard(arg(0))?),
        "zrange" => zrange(st, c, a)?,
        "zrangebyscore" => zrangebyscore(st, c, a, false)?,
        "zrevrangebyscore" => zrangebyscore(st, c, a, true)?,
        "zrevrange" => {
            // ZRANGE key start stop REV [WITHSCORES]
            let mut v: Vec<&[u8]> = a.get(..3).unwrap_or_default().to_vec();
            v.push(b"REV");
            v.extend_from_slice(a.get(3..).unwrap_or_default());
            zrange(st, c, &v)?
        }
        // ---- keys ----
        "scan" => scan(sh, a)?,
        "type" => Reply::Simple(st.kind(arg(0))?.map_or("none", Kind::name)),
        "dbsize" => Reply::Int(st.dbsize()?),
        // ---- server ----
        "info" => Reply::Verbatim(crate::info::info(sh, a)),
        "config" => config(sh, a)?,
        "command" => command(a)?,
        "flushdb" | "flushall" => {
            match a {
                [] => {}
                [m] if m.eq_ignore_ascii_case(b"async") || m.eq_ignore_ascii_case(b"sync") => {}
                _ => return Err(syntax()),
            }
            st.flushdb()?;
            Reply::OK
        }
        "save" => {
            st.flush()?;
            Reply::OK
        }
        _ => Reply::err(format!("unknown command '{name}'")),
    })
}

fn pair<'a>(c: &[&'a [u8]]) -> (&'a [u8], &'a [u8]) {
    (
        c.first().copied().unwrap_or_default(),
        c.get(1).copied().unwrap_or_default(),
    )
}

fn auth(sh: &Shared, c: &mut Conn, user: Option<&[u8]>, pass: &[u8]) -> Res<Reply> {
    if sh.config.requirepass.is_none() && user.is_none() {
        return Err(CmdError::err(
            "AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ));
    }
    let user_ok = user.is_none_or(|u| u == b"default");
    // Compare even for a wrong user name, so the time says nothing about which was wrong.
    let pass_ok = sh.password_ok(pass);
    if user_ok && pass_ok {
        c.authed = true;
        Ok(Reply::OK)
    } else {
        Err(CmdError::Msg(
            "WRONGPASS invalid username-password pair or user is disabled.".into(),
        ))
    }
}

fn hello(sh: &Shared, c: &mut Conn, a: &[&[u8]]) -> Res<Reply> {
    let mut proto = c.proto;
    let mut i = 0;
    if let Some(v) = a.first() {
        let v = parse_i64(v)
            .ok_or_else(|| CmdError::err("Protocol version is not an integer or out of range"))?;
        if !(2..=3).contains(&v) {
            return Err(CmdError::Msg("NOPROTO unsupported protocol version".into()));
        }
        proto = v as u8;
        i = 1;
    }
    let mut name = None;
    let mut authed = c.authed;
    while i < a.len() {
        let opt = a.get(i).copied().unwrap_or_default();
        let more = a.len() - i - 1;
        if opt.eq_ignore_ascii_case(b"auth") && more >= 2 {
            let (u, p) = (a.get(i + 1).copied(), a.get(i + 2).copied());
            let mut probe = Conn::new(0, String::new(), String::new(), false);
            auth(sh, &mut probe, u, p.unwrap_or_default())?;
            authed = true;
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"setname") && more >= 1 {
            name = a.get(i + 1).map(|n| n.to_vec());
            i += 2;
        } else {
            return Err(CmdError::err(format!(
                "Syntax error in HELLO option '{}'",
                s(opt)
            )));
        }
    }
    if !authed {
        return Err(CmdError::Msg(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        ));
    }
    if let Some(n) = &name {
        check_name(n)?;
    }
    c.authed = true;
    c.proto = proto;
    if name.is_some() {
        c.name = name;
    }
    let kv = |k: &str, v: Reply| (Reply::bulk(k), v);
    Ok(Reply::Map(vec![
        kv("server", Reply::bulk("redis")),
        kv("version", Reply::bulk(REDIS_VERSION)),
        kv("proto", Reply::Int(i64::from(proto))),
        kv("id", Reply::Int(c.id as i64)),
        kv("mode", Reply::bulk("standalone")),
        kv("role", Reply::bulk("master")),
        kv("modules", Reply::Array(Vec::new())),
    ]))
}

fn check_name(n: &[u8]) -> Res<()> {
    if n.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(CmdError::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

/// `CLIENT INFO`'s line for `c`.
pub fn client_line(c: &Conn) -> String {
    format!(
        "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags=N db=0 sub=0 psub=0 \
         multi=-1 cmd={} user=default resp={}\n",
        c.id,
        c.addr,
        c.laddr,
        c.name.as_deref().map(s).unwrap_or_default(),
        c.since.elapsed().as_secs(),
        c.last.elapsed().as_secs(),
        if c.last_cmd.is_empty() {
            "NULL"
        } else {
            &c.last_cmd
        },
        c.proto
    )
}

fn client(_sh: &Shared, c: &mut Conn, a: &[&[u8]]) -> Res<Reply> {
    let sub = s(a.first().copied().unwrap_or_default()).to_ascii_lowercase();
    let rest = a.get(1..).unwrap_or_default();
    let wrong = || {
        CmdError::err(format!(
            "wrong number of arguments for 'client|{sub}' command"
        ))
    };
    Ok(match sub.as_str() {
        "id" if rest.is_empty() => Reply::Int(c.id as i64),
        "getname" if rest.is_empty() => bulk_or_nil(c.name.clone()),
        "setname" => {
            let [n] = rest else { return Err(wrong()) };
            check_name(n)?;
            c.name = if n.is_empty() { None } else { Some(n.to_vec()) };
            Reply::OK
        }
        "info" if rest.is_empty() => Reply::Verbatim(client_line(c)),
        // Libraries announce themselves (redis-py 5 does); accepted and not kept.
        "setinfo" if rest.len() == 2 => Reply::OK,
        "id" | "getname" | "info" | "setinfo" => return Err(wrong()),
        _ => {
            return Err(CmdError::err(format!(
                "unknown subcommand '{}'. Try CLIENT HELP.",
                s(a.first().copied().unwrap_or_default())
            )))
        }
    })
}

fn set(st: &Store, a: &[&[u8]]) -> Res<Reply> {
    let (key, val) = (
        a.first().copied().unwrap_or_default(),
        a.get(1).copied().unwrap_or_default(),
    );
    let mut cond = Cond::Any;
    let mut ttl = Ttl::Clear;
    let mut get = false;
    let mut i = 2;
    let now = now_ms();
    while let Some(opt) = a.get(i) {
        let o = s(opt).to_ascii_uppercase();
        match o.as_str() {
            "NX" if cond == Cond::Any => cond = Cond::Absent,
            "XX" if cond == Cond::Any => cond = Cond::Present,
            "GET" => get = true,
            "KEEPTTL" if ttl == Ttl::Clear => ttl = Ttl::Keep,
            "EX" | "PX" | "EXAT" | "PXAT" if ttl == Ttl::Clear => {
                let Some(v) = a.get(i + 1) else {
                    return Err(syntax());
                };
                let v = int(v)?;
                ttl = Ttl::At(expire_time(&o, v, now, "set", false)?);
                i += 1;
            }
            _ => return Err(syntax()),
        }
        i += 1;
    }
    let (done, old) = st.set(key, val, cond, ttl, get)?;
    Ok(if get {
        bulk_or_nil(old)
    } else if done {
        Reply::OK
    } else {
        Reply::Nil
    })
}

/// The absolute expiry (ms) of `EX/PX/EXAT/PXAT v` (or `expire`-family units), refusing what
/// Redis refuses: non-positive values for SET, overflows for both.
fn expire_time(unit: &str, v: i64, now: u64, cmd: &str, allow_past: bool) -> Res<u64> {
    let bad = || CmdError::err(format!("invalid expire time in '{cmd}' command"));
    if !allow_past && v <= 0 {
        return Err(bad());
    }
    let ms = match unit {
        "EX" | "EXAT" => v.checked_mul(1000).ok_or_else(bad)?,
        _ => v,
    };
    let at = match unit {
        "EX" | "PX" => ms.checked_add(now as i64).ok_or_else(bad)?,
        _ => ms,
    };
    Ok(at.max(0) as u64)
}

fn expire(st: &Store, name: &str, a: &[&[u8]]) -> Res<Reply> {
    let key = a.first().copied().unwrap_or_default();
    let v = int(a.get(1).copied().unwrap_or_default())?;
    let mut cond = ExpireCond::Any;
    for opt in a.get(2..).unwrap_or_default() {
        let o = s(opt).to_ascii_uppercase();
        let new = match o.as_str() {
            "NX" => ExpireCond::Nx,
            "XX" => ExpireCond::Xx,
            "GT" => ExpireCond::Gt,
            "LT" => ExpireCond::Lt,
            _ => return Err(CmdError::err(format!("Unsupported option {}", s(opt)))),
        };
        cond = match (cond, new) {
            (ExpireCond::Any, n) => n,
            (a, b) if a == b => a,
            (ExpireCond::Gt, ExpireCond::Lt) | (ExpireCond::Lt, ExpireCond::Gt) => {
                return Err(CmdError::err(
                    "GT and LT options at the same time are not compatible",
                ))
            }
            _ => {
                return Err(CmdError::err(
                    "NX and XX, GT or LT options at the same time are not compatible",
                ))
            }
        };
    }
    let unit = match name {
        "expire" => "EX",
        "pexpire" => "PX",
        "expireat" => "EXAT",
        _ => "PXAT",
    };
    let at = expire_time(unit, v, now_ms(), name, true)?;
    Ok(Reply::Int(i64::from(st.expire_at(key, at, cond)?)))
}

fn zadd(st: &Store, a: &[&[u8]]) -> Res<Reply> {
    let key = a.first().copied().unwrap_or_default();
    let mut f = ZaddFlags::default();
    let mut i = 1;
    while let Some(opt) = a.get(i) {
        match s(opt).to_ascii_uppercase().as_str() {
            "NX" => f.nx = true,
            "XX" => f.xx = true,
            "GT" => f.gt = true,
            "LT" => f.lt = true,
            "CH" => f.ch = true,
            "INCR" => f.incr = true,
            _ => break,
        }
        i += 1;
    }
    let rest = a.get(i..).unwrap_or_default();
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(syntax());
    }
    if f.nx && f.xx {
        return Err(CmdError::err(
            "XX and NX options at the same time are not compatible",
        ));
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(CmdError::err(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if f.incr && rest.len() > 2 {
        return Err(CmdError::err(
            "INCR option supports a single increment-element pair",
        ));
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for p in rest.chunks_exact(2) {
        let (sc, m) = pair(p);
        let sc = float(sc).ok_or_else(|| CmdError::err("value is not a valid float"))?;
        pairs.push((sc, m));
    }
    let (n, last) = st.zadd(key, f, &pairs)?;
    Ok(if f.incr {
        last.map_or(Reply::Nil, Reply::Double)
    } else {
        Reply::Int(n)
    })
}

fn scored(c: &Conn, items: Vec<(Vec<u8>, f64)>, withscores: bool) -> Reply {
    if !withscores {
        return Reply::Array(items.into_iter().map(|(m, _)| Reply::Bulk(m)).collect());
    }
    if c.proto >= 3 {
        Reply::Array(
            items
                .into_iter()
                .map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)]))
                .collect(),
        )
    } else {
        Reply::Array(
            items
                .into_iter()
                .flat_map(|(m, s)| [Reply::Bulk(m), Reply::Double(s)])
                .collect(),
        )
    }
}

const ALL: ScoreBound = ScoreBound {
    value: f64::NEG_INFINITY,
    exclusive: false,
};
const TOP: ScoreBound = ScoreBound {
    value: f64::INFINITY,
    exclusive: false,
};

/// `LIMIT offset count` as (skip, take): a negative offset selects nothing, a negative count
/// everything after the offset.
fn limit(off: &[u8], count: &[u8]) -> Res<(usize, usize)> {
    let (o, n) = (int(off)?, int(count)?);
    if o < 0 {
        return Ok((0, 0));
    }
    Ok((o as usize, if n < 0 { usize::MAX } else { n as usize }))
}

fn zrange(st: &Store, c: &Conn, a: &[&[u8]]) -> Res<Reply> {
    let key = a.first().copied().unwrap_or_default();
    let (start, stop) = (
        a.get(1).copied().unwrap_or_default(),
        a.get(2).copied().unwrap_or_default(),
    );
    let (mut byscore, mut rev, mut withscores, mut lim) = (false, false, false, None);
    let mut i = 3;
    while let Some(opt) = a.get(i) {
        match s(opt).to_ascii_uppercase().as_str() {
            "BYSCORE" => byscore = true,
            "REV" => rev = true,
            "WITHSCORES" => withscores = true,
            "BYLEX" => {
                return Err(CmdError::err(
                    "ZRANGE BYLEX is not supported by scree serve (docs/server.md)",
                ))
            }
            "LIMIT" => {
                let (Some(o), Some(n)) = (a.get(i + 1), a.get(i + 2)) else {
                    return Err(syntax());
                };
                lim = Some(limit(o, n)?);
                i += 2;
            }
            _ => return Err(syntax()),
        }
        i += 1;
    }
    if byscore {
        // With REV the first bound is the maximum.
        let (lo, hi) = if rev { (stop, start) } else { (start, stop) };
        let (min, max) = (score_bound(lo)?, score_bound(hi)?);
        let (skip, take) = lim.unwrap_or((0, usize::MAX));
        return Ok(scored(
            c,
            st.zrange(key, min, max, rev, skip, take)?,
            withscores,
        ));
    }
    if lim.is_some() {
        return Err(CmdError::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    let (mut b, mut e) = (int(start)?, int(stop)?);
    let card = st.zcard(key)?;
    if b < 0 {
        b += card;
    }
    if e < 0 {
        e += card;
    }
    b = b.max(0);
    if b > e || b >= card {
        return Ok(Reply::Array(Vec::new()));
    }
    e = e.min(card - 1);
    let items = st.zrange(key, ALL, TOP, rev, b as usize, (e - b + 1) as usize)?;
    Ok(scored(c, items, withscores))
}

/// `ZRANGEBYSCORE key min max`, or with `rev` `ZREVRANGEBYSCORE key max min`.
fn zrangebyscore(st: &Store, c: &Conn, a: &[&[u8]], rev: bool) -> Res<Reply> {
    let key = a.first().copied().unwrap_or_default();
    let (lo, hi) = if rev { (2, 1) } else { (1, 2) };
    let min = score_bound(a.get(lo).copied().unwrap_or_default())?;
    let max = score_bound(a.get(hi).copied().unwrap_or_default())?;
    let (mut withscores, mut lim) = (false, (0, usize::MAX));
    let mut i = 3;
    while let Some(opt) = a.get(i) {
        match s(opt).to_ascii_uppercase().as_str() {
            "WITHSCORES" => withscores = true,
            "LIMIT" => {
                let (Some(o), Some(n)) = (a.get(i + 1), a.get(i + 2)) else {
                    return Err(syntax());
                };
                lim = limit(o, n)?;
                i += 2;
            }
            _ => return Err(syntax()),
        }
        i += 1;
    }
    Ok(scored(
        c,
        st.zrange(key, min, max, false, lim.0, lim.1)?,
        withscores,
    ))
}

fn scan(sh: &Shared, a: &[&[u8]]) -> Res<Reply> {
    let cur_b = a.first().copied().unwrap_or_default();
    let cur: u64 = std::str::from_utf8(cur_b)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| CmdError::err("invalid cursor"))?;
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut kind: Option<String> = None;
    let mut i = 1;
    while let Some(opt) = a.get(i) {
        let Some(v) = a.get(i + 1) else {
            return Err(syntax());
        };
        match s(opt).to_ascii_uppercase().as_str() {
            "MATCH" => pattern = Some(v),
            "COUNT" => {
                let n = int(v)?;
                if n < 1 {
                    return Err(syntax());
                }
                count = n as usize;
            }
            "TYPE" => kind = Some(s(v).to_ascii_lowercase()),
            _ => return Err(syntax()),
        }
        i += 2;
    }
    let after = if cur == 0 {
        None
    } else {
        Some(
            sh.cursor(cur)
                .ok_or_else(|| CmdError::err("invalid cursor"))?,
        )
    };
    // Star patterns match everything: skip the matcher.
    let pattern = pattern.filter(|p| *p != b"*");
    let (next, keys) = sh.store.scan(after.as_deref(), count, |k, t| {
        pattern.is_none_or(|p| glob::matches(p, k, false))
            && kind.as_deref().is_none_or(|want| want == t.name())
    })?;
    let next = match next {
        Some(k) => sh.save_cursor(k),
        None => 0,
    };
    Ok(Reply::Array(vec![
        Reply::bulk(next.to_string()),
        Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
    ]))
}

/// The settings `CONFIG GET` answers (what clients and benchmarks probe).
fn config_values(sh: &Shared) -> Vec<(&'static str, String)> {
    let c = &sh.config;
    vec![
        ("appendonly", "yes".into()),
        (
            "appendfsync",
            match c.appendfsync {
                Fsync::Always => "always",
                Fsync::EverySec => "everysec",
                Fsync::No => "no",
            }
            .into(),
        ),
        ("save", String::new()),
        ("databases", "1".into()),
        ("maxclients", c.maxclients.to_string()),
        ("timeout", c.timeout_secs.to_string()),
        ("maxmemory", "0".into()),
        ("maxmemory-policy", "noeviction".into()),
        ("proto-max-bulk-len", c.limits.max_bulk.to_string()),
        ("bind", c.bind.ip().to_string()),
        ("port", sh.port.to_string()),
        ("protected-mode", "yes".into()),
        ("dir", c.db.display().to_string()),
        ("cluster-enabled", "no".into()),
    ]
}

fn config(sh: &Shared, a: &[&[u8]]) -> Res<Reply> {
    let sub = s(a.first().copied().unwrap_or_default()).to_ascii_lowercase();
    let rest = a.get(1..).unwrap_or_default();
    match sub.as_str() {
        "get" => {
            if rest.is_empty() {
                return Err(CmdError::err(
                    "wrong number of arguments for 'config|get' command",
                ));
            }
            let vals = config_values(sh);
            let mut out = Vec::new();
            for (k, v) in &vals {
                if rest.iter().any(|p| glob::matches(p, k.as_bytes(), true)) {
                    out.push((Reply::bulk(k), Reply::bulk(v)));
                }
            }
            Ok(Reply::Map(out))
        }
        "set" => Err(CmdError::err(
            "CONFIG SET is not supported by scree serve: settings are command-line flags \
             (docs/server.md)",
        )),
        "resetstat" => Ok(Reply::OK),
        _ => Err(CmdError::err(format!(
            "unknown subcommand '{}'. Try CONFIG HELP.",
            s(a.first().copied().unwrap_or_default())
        ))),
    }
}

fn command_info(name: &str) -> Reply {
    let ar = arity(name).unwrap_or(-1);
    let flags = if writes(name) { "write" } else { "readonly" };
    Reply::Array(vec![
        Reply::bulk(name),
        Reply::Int(i64::from(ar)),
        Reply::Array(vec![Reply::Status(flags.into())]),
        Reply::Int(0),
        Reply::Int(0),
        Reply::Int(0),
    ])
}

fn command(a: &[&[u8]]) -> Res<Reply> {
    let Some(sub) = a.first() else {
        return Ok(Reply::Array(
            COMMANDS.iter().map(|n| command_info(n)).collect(),
        ));
    };
    match s(sub).to_ascii_lowercase().as_str() {
        "count" => Ok(Reply::Int(COMMANDS.len() as i64)),
        // Documentation is not served: an empty map, which clients read as "no docs".
        "docs" => Ok(Reply::Map(Vec::new())),
        "info" => Ok(Reply::Array(
            a.get(1..)
                .unwrap_or_default()
                .iter()
                .map(|n| {
                    let n = s(n).to_ascii_lowercase();
                    if COMMANDS.contains(&n.as_str()) {
                        command_info(&n)
                    } else {
                        Reply::NilArray
                    }
                })
                .collect(),
        )),
        _ => Err(CmdError::err(format!(
            "unknown subcommand '{}'. Try COMMAND HELP.",
            s(sub)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secre"));
        assert!(!constant_time_eq(b"secret", b"secrets"));
        assert!(!constant_time_eq(b"secret", b""));
        assert!(constant_time_eq(b"", b""));
        // A candidate whose bytes are the complement (the padding used past its end).
        assert!(!constant_time_eq(b"ab", b"a"));
    }

    #[test]
    fn floats_parse_as_redis_scores() {
        assert_eq!(float(b"1.5"), Some(1.5));
        assert_eq!(float(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(float(b"+inf"), Some(f64::INFINITY));
        assert_eq!(float(b"1e3"), Some(1000.0));
        for bad in [&b""[..], b"nan", b" 1", b"1 ", b"abc", b"1.2.3"] {
            assert_eq!(float(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn expire_times_refuse_what_redis_refuses() {
        assert_eq!(expire_time("EX", 10, 1000, "set", false).unwrap(), 11_000);
        assert_eq!(expire_time("PX", 10, 1000, "set", false).unwrap(), 1010);
        assert_eq!(expire_time("PXAT", 77, 1000, "set", false).unwrap(), 77);
        let e = |r: Res<u64>| match r {
            Err(CmdError::Msg(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            e(expire_time("EX", 0, 1, "set", false)),
            "ERR invalid expire time in 'set' command"
        );
        assert_eq!(
            e(expire_time("EX", i64::MAX, 1, "expire", true)),
            "ERR invalid expire time in 'expire' command"
        );
        assert_eq!(
            expire_time("EX", -5, 100_000, "expire", true).unwrap(),
            95_000
        );
    }
}
