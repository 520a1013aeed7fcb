//! The server over real sockets on an ephemeral loopback port: pipelining, errors that keep
//! or close the connection, AUTH, protected mode, the client cap, the idle timeout, expiry,
//! and a shutdown whose data a reopened server reads back.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use scree_server::{start, Config, Fsync};

/// A reply as the tests compare it.
#[derive(Debug, Clone, PartialEq)]
enum R {
    S(String),
    E(String),
    I(i64),
    B(Option<Vec<u8>>),
    A(Option<Vec<R>>),
    Map(Vec<(R, R)>),
    D(String),
    Null,
}

fn b(s: &str) -> R {
    R::B(Some(s.as_bytes().to_vec()))
}

struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Client {
    fn connect(addr: std::net::SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&out).unwrap();
    }

    fn cmd(&mut self, args: &[&str]) -> R {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a);
        self.read()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        assert!(l.ends_with("\r\n"), "line {l:?}");
        l.truncate(l.len() - 2);
        l
    }

    fn read(&mut self) -> R {
        let l = self.line();
        let (t, rest) = l.split_at(1);
        match t {
            "+" => R::S(rest.into()),
            "-" => R::E(rest.into()),
            ":" => R::I(rest.parse().unwrap()),
            "," => R::D(rest.into()),
            "_" => R::Null,
            "$" | "=" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return R::B(None);
                }
                let mut v = vec![0; n as usize + 2];
                self.r.read_exact(&mut v).unwrap();
                v.truncate(n as usize);
                R::B(Some(v))
            }
            "*" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return R::A(None);
                }
                R::A(Some((0..n).map(|_| self.read()).collect()))
            }
            "%" => {
                let n: usize = rest.parse().unwrap();
                R::Map((0..n).map(|_| (self.read(), self.read())).collect())
            }
            _ => panic!("unexpected reply line {l:?}"),
        }
    }

    /// Whether the server closed the connection (EOF on the next read).
    fn closed(&mut self) -> bool {
        let mut one = [0u8; 1];
        matches!(self.r.read(&mut one), Ok(0))
    }
}

fn config(dir: &std::path::Path) -> Config {
    let mut c = Config::new(dir);
    c.bind = "127.0.0.1:0".parse().unwrap();
    c.write_buffer_bytes = 1 << 20;
    c
}

/// A server on `dir` with `layout` (other settings as [`config`]), and a client of it.
fn serve_on(
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    layout: scree::Layout,
) -> (scree_server::Running, Client) {
    let mut cfg = config(dir);
    cfg.layout = layout;
    let srv = rt.block_on(start(cfg)).unwrap();
    let c = Client::connect(srv.addr());
    (srv, c)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn strings_pipelines_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let srv = rt.block_on(start(config(dir.path()))).unwrap();
    let mut c = Client::connect(srv.addr());
    assert_eq!(c.cmd(&["PING"]), R::S("PONG".into()));
    assert_eq!(c.cmd(&["ping", "hi"]), b("hi"));
    assert_eq!(c.cmd(&["SET", "k", "v"]), R::S("OK".into()));
    assert_eq!(c.cmd(&["GET", "k"]), b("v"));
    assert_eq!(c.cmd(&["SET", "k", "w", "NX"]), R::B(None));
    assert_eq!(c.cmd(&["SET", "k", "w", "XX", "GET"]), b("v"));
    assert_eq!(c.cmd(&["SET", "n", "w", "XX"]), R::B(None));
    assert_eq!(
        c.cmd(&["SET", "k", "x", "NX", "XX"]),
        R::E("ERR syntax error".into())
    );
    assert_eq!(
        c.cmd(&["SET", "k", "x", "EX", "-1"]),
        R::E("ERR invalid expire time in 'set' command".into())
    );
    assert_eq!(
        c.cmd(&["SET", "k", "x", "EX", "z"]),
        R::E("ERR value is not an integer or out of range".into())
    );
    assert_eq!(
        c.cmd(&["GET"]),
        R::E("ERR wrong number of arguments for 'get' command".into())
    );
    assert_eq!(
        c.cmd(&["NOPE", "a", "b"]),
        R::E("ERR unknown command 'NOPE', with args beginning with: 'a' 'b' ".into())
    );
    // The connection stays usable after errors.
    assert_eq!(c.cmd(&["INCR", "ctr"]), R::I(1));
    assert_eq!(c.cmd(&["INCRBY", "ctr", "41"]), R::I(42));
    assert_eq!(c.cmd(&["DECRBY", "ctr", "2"]), R::I(40));
    assert_eq!(
        c.cmd(&["INCR", "k"]),
        R::E("ERR value is not an integer or out of range".into())
    );
    assert_eq!(
        c.cmd(&["SET", "big", "9223372036854775807"]),
        R::S("OK".into())
    );
    assert_eq!(
        c.cmd(&["INCR", "big"]),
        R::E("ERR increment or decrement would overflow".into())
    );
    assert_eq!(c.cmd(&["APPEND", "k", "yz"]), R::I(3));
    assert_eq!(c.cmd(&["STRLEN", "k"]), R::I(3));
    assert_eq!(c.cmd(&["MSET", "a", "1", "b", "2"]), R::S("OK".into()));
    assert_eq!(
        c.cmd(&["MGET", "a", "b", "zz"]),
        R::A(Some(vec![b("1"), b("2"), R::B(None)]))
    );
    assert_eq!(c.cmd(&["EXISTS", "a", "a", "zz"]), R::I(2));
    assert_eq!(c.cmd(&["DEL", "a", "b", "zz"]), R::I(2));
    assert_eq!(c.cmd(&["GETDEL", "k"]), b("wyz"));
    assert_eq!(c.cmd(&["GET", "k"]), R::B(None));
    assert_eq!(c.cmd(&["SETNX", "k", "1"]), R::I(1));
    assert_eq!(c.cmd(&["SETNX", "k", "2"]), R::I(0));
    assert_eq!(c.cmd(&["SELECT", "0"]), R::S("OK".into()));
    assert_eq!(
        c.cmd(&["SELECT", "1"]),
        R::E("ERR DB index is out of range".into())
    );

    // A pipeline of 1,000 commands in one write: 1,000 replies in order.
    let mut buf = Vec::new();
    for i in 0..1000 {
        let (k, v) = (format!("p{i}"), format!("v{i}"));
        buf.extend_from_slice(
            format!(
                "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
                k.len(),
                v.len()
            )
            .as_bytes(),
        );
        buf.extend_from_slice(format!("*2\r\n$3\r\nGET\r\n${}\r\n{k}\r\n", k.len()).as_bytes());
    }
    c.w.write_all(&buf).unwrap();
    for i in 0..1000 {
        assert_eq!(c.read(), R::S("OK".into()));
        assert_eq!(c.read(), b(&format!("v{i}")));
    }
    // Inline commands, as telnet sends them.
    c.w.write_all(b"SET inline \"a b\"\r\nGET inline\r\n")
        .unwrap();
    assert_eq!(c.read(), R::S("OK".into()));
    assert_eq!(c.read(), b("a b"));

    // A malformed request: the requests before it ran, then the error, then the close.
    c.w.write_all(b"*1\r\n$4\r\nPING\r\n*1\r\n$-5\r\n").unwrap();
    assert_eq!(c.read(), R::S("PONG".into()));
    assert_eq!(
        c.read(),
        R::E("ERR Protocol error: invalid bulk length".into())
    );
    assert!(c.closed());
    rt.block_on(srv.shutdown()).unwrap();
}

#[test]
fn resp3_hashes_sorted_sets_scan_and_types() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let srv = rt.block_on(start(config(dir.path()))).unwrap();
    let mut c = Client::connect(srv.addr());
    assert_eq!(c.cmd(&["HSET", "h", "f1", "1", "f2", "2"]), R::I(2));
    assert_eq!(
        c.cmd(&["HSET", "h", "f1", "x", "f3", "3", "f3", "4"]),
        R::I(1)
    );
    assert_eq!(c.cmd(&["HGET", "h", "f3"]), b("4"));
    assert_eq!(c.cmd(&["HLEN", "h"]), R::I(3));
    assert_eq!(
        c.cmd(&["HMGET", "h", "f1", "no"]),
        R::A(Some(vec![b("x"), R::B(None)]))
    );
    assert_eq!(c.cmd(&["HEXISTS", "h", "f2"]), R::I(1));
    assert_eq!(c.cmd(&["HINCRBY", "h", "f2", "5"]), R::I(7));
    assert_eq!(
        c.cmd(&["HINCRBY", "h", "f1", "1"]),
        R::E("ERR hash value is not an integer".into())
    );
    assert_eq!(c.cmd(&["HDEL", "h", "f1", "f1", "no"]), R::I(1));
    assert_eq!(c.cmd(&["TYPE", "h"]), R::S("hash".into()));
    assert_eq!(
        c.cmd(&["GET", "h"]),
        R::E("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
    assert_eq!(c.cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]), R::I(3));
    assert_eq!(c.cmd(&["ZADD", "z", "CH", "5", "a", "-1.5", "d"]), R::I(2));
    assert_eq!(c.cmd(&["ZCARD", "z"]), R::I(4));
    assert_eq!(
        c.cmd(&["ZRANGE", "z", "0", "-1"]),
        R::A(Some(vec![b("d"), b("b"), b("c"), b("a")]))
    );
    assert_eq!(
        c.cmd(&["ZRANGEBYSCORE", "z", "(-1.5", "+inf", "LIMIT", "1", "2"]),
        R::A(Some(vec![b("c"), b("a")]))
    );
    assert_eq!(c.cmd(&["ZSCORE", "z", "d"]), b("-1.5"));
    assert_eq!(c.cmd(&["ZREM", "z", "d", "zz"]), R::I(1));
    assert_eq!(
        c.cmd(&["ZADD", "z", "x", "m"]),
        R::E("ERR value is not a valid float".into())
    );
    assert_eq!(
        c.cmd(&["ZRANGEBYSCORE", "z", "x", "1"]),
        R::E("ERR min or max is not a float".into())
    );
    assert_eq!(c.cmd(&["TYPE", "z"]), R::S("zset".into()));
    assert_eq!(c.cmd(&["TYPE", "none"]), R::S("none".into()));

    // RESP3: HELLO 3, maps and doubles.
    let R::Map(hello) = c.cmd(&["HELLO", "3"]) else {
        panic!("HELLO 3 is a map")
    };
    assert!(hello.contains(&(b("proto"), R::I(3))));
    assert_eq!(
        c.cmd(&["HGETALL", "h"]),
        R::Map(vec![(b("f2"), b("7")), (b("f3"), b("4"))])
    );
    assert_eq!(c.cmd(&["ZSCORE", "z", "b"]), R::D("2".into()));
    assert_eq!(c.cmd(&["GET", "nothing"]), R::Null);
    assert_eq!(
        c.cmd(&["ZRANGE", "z", "0", "0", "WITHSCORES"]),
        R::A(Some(vec![R::A(Some(vec![b("b"), R::D("2".into())]))]))
    );
    assert_eq!(
        c.cmd(&["HELLO", "4"]),
        R::E("NOPROTO unsupported protocol version".into())
    );
    assert_eq!(c.cmd(&["RESET"]), R::S("RESET".into()));
    assert_eq!(c.cmd(&["GET", "nothing"]), R::B(None));

    // SCAN walks every key once, with MATCH and TYPE filters.
    for i in 0..250 {
        c.cmd(&["SET", &format!("user:{i}"), "x"]);
    }
    let mut cursor = "0".to_string();
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let R::A(Some(v)) = c.cmd(&["SCAN", &cursor, "MATCH", "user:*", "COUNT", "7"]) else {
            panic!()
        };
        let R::B(Some(next)) = &v[0] else { panic!() };
        let R::A(Some(keys)) = &v[1] else { panic!() };
        for k in keys {
            let R::B(Some(k)) = k else { panic!() };
            assert!(seen.insert(k.clone()), "key returned twice");
        }
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 250);
    let R::A(Some(v)) = c.cmd(&["SCAN", "0", "TYPE", "zset", "COUNT", "1000"]) else {
        panic!()
    };
    assert_eq!(v[1], R::A(Some(vec![b("z")])));
    assert_eq!(c.cmd(&["SCAN", "12345"]), R::E("ERR invalid cursor".into()));
    assert_eq!(c.cmd(&["DBSIZE"]), R::I(252));
    assert_eq!(c.cmd(&["FLUSHDB"]), R::S("OK".into()));
    assert_eq!(c.cmd(&["DBSIZE"]), R::I(0));
    assert_eq!(c.cmd(&["HGETALL", "h"]), R::A(Some(vec![])));
    // A new hash at a flushed key does not see the old fields (a new generation).
    assert_eq!(c.cmd(&["HSET", "h", "new", "1"]), R::I(1));
    assert_eq!(c.cmd(&["HLEN", "h"]), R::I(1));
    assert_eq!(c.cmd(&["HGET", "h", "f2"]), R::B(None));
    rt.block_on(srv.shutdown()).unwrap();
}

#[test]
fn expiry_is_checked_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let srv = rt.block_on(start(config(dir.path()))).unwrap();
    let mut c = Client::connect(srv.addr());
    assert_eq!(c.cmd(&["SET", "k", "v", "PX", "150"]), R::S("OK".into()));
    assert_eq!(c.cmd(&["HSET", "h", "f", "v"]), R::I(1));
    assert_eq!(c.cmd(&["PEXPIRE", "h", "150"]), R::I(1));
    assert_eq!(c.cmd(&["SET", "p", "v", "EX", "100"]), R::S("OK".into()));
    let R::I(t) = c.cmd(&["TTL", "p"]) else {
        panic!()
    };
    assert!((99..=100).contains(&t), "ttl {t}");
    assert_eq!(c.cmd(&["PERSIST", "p"]), R::I(1));
    assert_eq!(c.cmd(&["TTL", "p"]), R::I(-1));
    assert_eq!(c.cmd(&["TTL", "none"]), R::I(-2));
    assert_eq!(c.cmd(&["EXPIRE", "p", "100", "XX"]), R::I(0));
    assert_eq!(c.cmd(&["EXPIRE", "p", "100", "NX"]), R::I(1));
    assert_eq!(c.cmd(&["EXPIRE", "p", "50", "GT"]), R::I(0));
    assert_eq!(
        c.cmd(&["EXPIRE", "p", "50", "GT", "LT"]),
        R::E("ERR GT and LT options at the same time are not compatible".into())
    );
    assert_eq!(c.cmd(&["SET", "p", "w", "KEEPTTL"]), R::S("OK".into()));
    let R::I(t) = c.cmd(&["PTTL", "p"]) else {
        panic!()
    };
    assert!(t > 90_000, "KEEPTTL kept the expiry: {t}");
    assert_eq!(c.cmd(&["GET", "k"]), b("v"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.cmd(&["GET", "k"]), R::B(None));
    assert_eq!(c.cmd(&["EXISTS", "k", "h"]), R::I(0));
    assert_eq!(c.cmd(&["HGET", "h", "f"]), R::B(None));
    assert_eq!(c.cmd(&["TYPE", "h"]), R::S("none".into()));
    // A hash made again at the expired key starts empty.
    assert_eq!(c.cmd(&["HSET", "h", "g", "1"]), R::I(1));
    assert_eq!(c.cmd(&["HGETALL", "h"]), R::A(Some(vec![b("g"), b("1")])));
    // A past time deletes.
    assert_eq!(c.cmd(&["EXPIRE", "p", "-1"]), R::I(1));
    assert_eq!(c.cmd(&["GET", "p"]), R::B(None));
    rt.block_on(srv.shutdown()).unwrap();
}

#[test]
fn auth_protected_mode_client_cap_and_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    // Protected mode: no password, no public address.
    let mut open = config(dir.path());
    open.bind = "0.0.0.0:0".parse().unwrap();
    let e = rt.block_on(start(open)).err().expect("refused");
    assert!(e.to_string().contains("protected mode"), "{e}");

    let mut cfg = config(dir.path());
    cfg.requirepass = Some("s3cret".into());
    cfg.maxclients = 2;
    cfg.timeout_secs = 1;
    let srv = rt.block_on(start(cfg)).unwrap();
    let mut c = Client::connect(srv.addr());
    assert_eq!(
        c.cmd(&["GET", "k"]),
        R::E("NOAUTH Authentication required.".into())
    );
    assert_eq!(
        c.cmd(&["AUTH", "wrong"]),
        R::E("WRONGPASS invalid username-password pair or user is disabled.".into())
    );
    assert_eq!(
        c.cmd(&["AUTH", "bob", "s3cret"]),
        R::E("WRONGPASS invalid username-password pair or user is disabled.".into())
    );
    assert_eq!(c.cmd(&["AUTH", "default", "s3cret"]), R::S("OK".into()));
    assert_eq!(c.cmd(&["SET", "k", "v"]), R::S("OK".into()));
    // HELLO can authenticate too.
    let mut d = Client::connect(srv.addr());
    let R::Map(_) = d.cmd(&["HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "me"]) else {
        panic!()
    };
    assert_eq!(d.cmd(&["CLIENT", "GETNAME"]), b("me"));
    // The third client is refused.
    let mut e = Client::connect(srv.addr());
    assert_eq!(e.read(), R::E("ERR max number of clients reached".into()));
    assert!(e.closed());
    // Idle clients are disconnected after the timeout.
    std::thread::sleep(Duration::from_millis(1600));
    assert!(c.closed());
    assert!(d.closed());
    rt.block_on(srv.shutdown()).unwrap();
}

#[test]
fn shutdown_keeps_every_acknowledged_write_for_each_fsync_policy() {
    for (i, fsync) in [Fsync::Always, Fsync::EverySec, Fsync::No]
        .into_iter()
        .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let rt = rt();
        let mut cfg = config(dir.path());
        cfg.appendfsync = fsync;
        let layout = scree::Layout::implemented()[i % 3];
        cfg.layout = layout;
        let srv = rt.block_on(start(cfg.clone())).unwrap();
        let mut c = Client::connect(srv.addr());
        for k in 0..3000 {
            assert_eq!(
                c.cmd(&["SET", &format!("k{k}"), &format!("v{k}")]),
                R::S("OK".into())
            );
        }
        c.cmd(&["HSET", "h", "f", "v"]);
        c.cmd(&["ZADD", "z", "1", "m"]);
        rt.block_on(srv.shutdown()).unwrap();
        // Reopened with pread instead of the memory map (--no-mmap-reads): the flushed
        // tables read back the same.
        cfg.mmap_reads = false;
        let srv = rt.block_on(start(cfg)).unwrap();
        let mut c = Client::connect(srv.addr());
        for k in 0..3000 {
            assert_eq!(
                c.cmd(&["GET", &format!("k{k}")]),
                b(&format!("v{k}")),
                "{fsync:?} {layout}"
            );
        }
        assert_eq!(c.cmd(&["HGET", "h", "f"]), b("v"));
        assert_eq!(c.cmd(&["ZSCORE", "z", "m"]), b("1"));
        rt.block_on(srv.shutdown()).unwrap();
    }
}

#[test]
fn request_bounds_close_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let mut cfg = config(dir.path());
    cfg.limits.max_bulk = 1024;
    cfg.limits.max_elements = 8;
    let srv = rt.block_on(start(cfg)).unwrap();
    let cases: [(&[u8], &str); 4] = [
        (
            b"*1\r\n$1025\r\n",
            "ERR Protocol error: invalid bulk length",
        ),
        (b"*9\r\n", "ERR Protocol error: invalid multibulk length"),
        (
            b"*1\r\n+PING\r\n",
            "ERR Protocol error: expected '$', got '+'",
        ),
        (
            &[b'x'; 70_000],
            "ERR Protocol error: too big inline request",
        ),
    ];
    for (req, want) in cases {
        let mut c = Client::connect(srv.addr());
        c.w.write_all(req).unwrap();
        assert_eq!(c.read(), R::E(want.into()));
        assert!(c.closed());
    }
    // Nothing of a refused request was applied.
    let mut c = Client::connect(srv.addr());
    c.w.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000\r\n")
        .unwrap();
    assert_eq!(
        c.read(),
        R::E("ERR Protocol error: invalid bulk length".into())
    );
    let mut c = Client::connect(srv.addr());
    assert_eq!(c.cmd(&["EXISTS", "k"]), R::I(0));
    rt.block_on(srv.shutdown()).unwrap();
}

/// Expired keys leave the `redis` keyspace when compactions merge them (the expiry filter),
/// and a deleted hash leaves no field behind.
#[test]
fn compactions_drop_expired_keys_and_deletes_drop_fields() {
    for layout in scree::Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let rt = rt();
        let (srv, mut c) = serve_on(&rt, dir.path(), layout);
        for i in 0..200 {
            let k = format!("key:{i}");
            if i % 2 == 0 {
                assert_eq!(c.cmd(&["SET", &k, "v", "PX", "100"]), R::S("OK".into()));
            } else {
                assert_eq!(c.cmd(&["SET", &k, "v"]), R::S("OK".into()));
            }
        }
        assert_eq!(c.cmd(&["HSET", "h", "a", "1", "b", "2", "c", "3"]), R::I(3));
        assert_eq!(c.cmd(&["DEL", "h"]), R::I(1));
        let store = &srv.shared().store;
        store.db().flush().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        // The live keys again, in a second table over the same key range: the compaction
        // merges the two (a table moved down whole is not rewritten, so not filtered).
        for i in (1..200).step_by(2) {
            assert_eq!(c.cmd(&["SET", &format!("key:{i}"), "v"]), R::S("OK".into()));
        }
        store.db().compact().unwrap();
        let main = store.main_keyspace();
        for i in 0..200 {
            let k = format!("key:{i}");
            // Read straight from the engine: no expiry check on this path.
            let mut stored = k.clone().into_bytes();
            if let scree::Order::PrefixGroups(n) = layout.order() {
                let h = xxhash_rust::xxh3::xxh3_128(k.as_bytes()).to_be_bytes();
                stored = [&h[..n], k.as_bytes()].concat();
            }
            let raw = main.get(&stored).unwrap();
            assert_eq!(raw.is_some(), i % 2 == 1, "{layout}: {k} after compaction");
        }
        if store.hash_keyspace().layout().order().serves_range() {
            let left = store.hash_keyspace().range::<Vec<u8>, _>(..).count();
            assert_eq!(left, 0, "{layout}: fields of a deleted hash");
        }
        rt.block_on(srv.shutdown()).unwrap();
    }
}

/// Every key `SCAN` returns from cursor 0 to the end (each once), with `extra` options.
fn scan_all(c: &mut Client, extra: &[&str]) -> std::collections::BTreeSet<String> {
    let mut cursor = "0".to_string();
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let mut args = vec!["SCAN", &cursor, "COUNT", "7"];
        args.extend_from_slice(extra);
        let R::A(Some(v)) = c.cmd(&args) else {
            panic!("SCAN reply")
        };
        let R::B(Some(next)) = &v[0] else { panic!() };
        let R::A(Some(keys)) = &v[1] else { panic!() };
        for k in keys {
            let R::B(Some(k)) = k else { panic!() };
            assert!(
                seen.insert(String::from_utf8(k.clone()).unwrap()),
                "key returned twice"
            );
        }
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            return seen;
        }
    }
}

#[test]
fn scan_dbsize_and_flushdb_on_every_layout() {
    for layout in scree::Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let rt = rt();
        let (srv, mut c) = serve_on(&rt, dir.path(), layout);
        // Every command that makes or removes a key, against a model of the live keys.
        let mut live = std::collections::BTreeSet::new();
        for i in 0..120 {
            let k = format!("user:{i}");
            c.cmd(&["SET", &k, "x"]);
            live.insert(k);
        }
        c.cmd(&["MSET", "m1", "1", "m2", "2", "m1", "3"]);
        c.cmd(&["INCR", "counter"]);
        c.cmd(&["APPEND", "log", "a"]);
        c.cmd(&["HSET", "h", "f", "1"]);
        c.cmd(&["HINCRBY", "h2", "f", "1"]);
        c.cmd(&["ZADD", "z", "1", "a"]);
        c.cmd(&["HSET", "gone-hash", "f", "1"]);
        c.cmd(&["HDEL", "gone-hash", "f"]);
        c.cmd(&["ZADD", "gone-zset", "1", "a"]);
        c.cmd(&["ZREM", "gone-zset", "a"]);
        c.cmd(&["SET", "getdel", "1"]);
        c.cmd(&["GETDEL", "getdel"]);
        c.cmd(&["SET", "past", "1"]);
        c.cmd(&["EXPIRE", "past", "-1"]);
        c.cmd(&["SET", "short", "1", "PX", "1"]);
        for k in ["m1", "m2", "counter", "log", "h", "h2", "z"] {
            live.insert(k.to_string());
        }
        for i in 0..10 {
            let k = format!("user:{i}");
            assert_eq!(c.cmd(&["DEL", &k]), R::I(1));
            live.remove(&k);
        }
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(scan_all(&mut c, &[]), live, "{layout}: SCAN");
        let hashes = scan_all(&mut c, &["TYPE", "hash"]);
        assert_eq!(hashes.into_iter().collect::<Vec<_>>(), ["h", "h2"]);
        let ones: std::collections::BTreeSet<String> = live
            .iter()
            .filter(|k| k.starts_with("user:1"))
            .cloned()
            .collect();
        assert_eq!(scan_all(&mut c, &["MATCH", "user:1*"]), ones, "{layout}");
        assert_eq!(c.cmd(&["DBSIZE"]), R::I(live.len() as i64), "{layout}");
        rt.block_on(srv.shutdown()).unwrap();

        // Reopened: the same keys; then FLUSHDB empties it, and new keys are found again.
        let (srv, mut c) = serve_on(&rt, dir.path(), layout);
        assert_eq!(scan_all(&mut c, &[]), live, "{layout}: SCAN after reopen");
        assert_eq!(c.cmd(&["FLUSHDB"]), R::S("OK".into()));
        assert_eq!(c.cmd(&["DBSIZE"]), R::I(0), "{layout}");
        assert!(
            scan_all(&mut c, &[]).is_empty(),
            "{layout}: SCAN after FLUSHDB"
        );
        assert_eq!(c.cmd(&["GET", "user:50"]), R::B(None));
        assert_eq!(c.cmd(&["HGETALL", "h"]), R::A(Some(vec![])));
        c.cmd(&["SET", "after", "1"]);
        let after: Vec<String> = scan_all(&mut c, &[]).into_iter().collect();
        assert_eq!(after, ["after"], "{layout}");
        rt.block_on(srv.shutdown()).unwrap();
    }
}

#[test]
fn scan_refuses_a_hashed_database_made_without_a_key_directory() {
    // A `redis` keyspace on `trie` with a key in it, as a server that kept no directory left.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = scree::Db::open(dir.path(), scree::Options::default()).unwrap();
        let ks = db
            .keyspace("redis", scree::KeyspaceOptions::new(scree::Layout::Trie))
            .unwrap();
        ks.put(b"k", [1u8, b'v']).unwrap();
    }
    let rt = rt();
    let (srv, mut c) = serve_on(&rt, dir.path(), scree::Layout::Trie);
    assert_eq!(c.cmd(&["GET", "k"]), b("v"));
    let R::E(e) = c.cmd(&["SCAN", "0"]) else {
        panic!("SCAN should be refused")
    };
    assert!(e.contains("was made without a key directory"), "{e}");
    let R::E(e) = c.cmd(&["FLUSHDB"]) else {
        panic!("FLUSHDB should be refused")
    };
    assert!(
        e.starts_with("ERR FLUSHDB is not supported on layout `trie`"),
        "{e}"
    );
    // Everything else still works.
    assert_eq!(c.cmd(&["SET", "k2", "w"]), R::S("OK".into()));
    assert_eq!(c.cmd(&["GET", "k2"]), b("w"));
    rt.block_on(srv.shutdown()).unwrap();
}

#[test]
fn a_key_directory_is_chosen_when_the_database_is_made() {
    let rt = rt();
    // Made without one: SCAN is refused, naming the flag, now and after a reopen with it.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.layout = scree::Layout::Trie;
    cfg.key_directory = false;
    let srv = rt.block_on(start(cfg)).unwrap();
    let mut c = Client::connect(srv.addr());
    assert_eq!(c.cmd(&["SET", "k", "v"]), R::S("OK".into()));
    let R::E(e) = c.cmd(&["SCAN", "0"]) else {
        panic!("SCAN should be refused")
    };
    assert!(e.contains("--no-key-directory"), "{e}");
    rt.block_on(srv.shutdown()).unwrap();
    let (srv, mut c) = serve_on(&rt, dir.path(), scree::Layout::Trie);
    let R::E(e) = c.cmd(&["FLUSHDB"]) else {
        panic!("FLUSHDB should be refused")
    };
    assert!(e.contains("was made without a key directory"), "{e}");
    assert_eq!(c.cmd(&["GET", "k"]), b("v"));
    rt.block_on(srv.shutdown()).unwrap();

    // Made with one: opening it without is refused (the directory would go stale).
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.layout = scree::Layout::Trie;
    let srv = rt.block_on(start(cfg)).unwrap();
    rt.block_on(srv.shutdown()).unwrap();
    let mut cfg = config(dir.path());
    cfg.layout = scree::Layout::Trie;
    cfg.key_directory = false;
    let err = rt.block_on(start(cfg)).err().expect("refused");
    assert!(err.to_string().contains("keeps a key directory"), "{err}");
}

/// Sub-entries (hash fields, sorted-set members) of Redis key `key` left in `ks`.
fn subs_of(ks: &scree::Keyspace, key: &str) -> usize {
    let group = xxhash_rust::xxh3::xxh3_64(key.as_bytes()).to_be_bytes();
    let mut n = 0;
    for item in ks.prefix(group) {
        item.unwrap();
        n += 1;
    }
    n
}

/// Whether `SET` writes blind on `layout` (served with its defaults): not where the server
/// keeps a key directory (`trie`, `semisorted`), whose `SET` reads the header first and
/// deletes a replaced collection's sub-entries in its batch.
fn set_is_blind(layout: scree::Layout) -> bool {
    !matches!(
        layout,
        scree::Layout::Trie | scree::Layout::SemiSorted { .. }
    )
}

#[test]
fn an_expired_collection_leaves_no_sub_entries_once_written_again_or_scanned() {
    for layout in scree::Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let rt = rt();
        let (srv, mut c) = serve_on(&rt, dir.path(), layout);
        assert_eq!(c.cmd(&["HSET", "h", "a", "1", "b", "2", "c", "3"]), R::I(3));
        assert_eq!(c.cmd(&["ZADD", "z", "1", "a", "2", "b"]), R::I(2));
        assert_eq!(c.cmd(&["HSET", "s", "a", "1"]), R::I(1));
        for k in ["h", "z", "s"] {
            assert_eq!(c.cmd(&["PEXPIRE", k, "1"]), R::I(1));
        }
        std::thread::sleep(Duration::from_millis(5));
        let store = &srv.shared().store;
        assert_eq!(subs_of(store.hash_keyspace(), "h"), 3, "{layout}");
        // Written again: the expired hash's three fields go in the same batch.
        assert_eq!(c.cmd(&["HSET", "h", "new", "1"]), R::I(1));
        assert_eq!(subs_of(store.hash_keyspace(), "h"), 1, "{layout}");
        assert_eq!(c.cmd(&["HGETALL", "h"]), R::A(Some(vec![b("new"), b("1")])));
        // Replaced by a string: written blind, the members and their score entries stay
        // until compaction (`sets_over_collections_leave_orphans_that_compaction_drops`);
        // read first (a key directory), they go in the SET's batch.
        assert_eq!(subs_of(store.zset_keyspace(), "z"), 4, "{layout}");
        assert_eq!(c.cmd(&["SET", "z", "v"]), R::S("OK".into()));
        let left = if set_is_blind(layout) { 4 } else { 0 };
        assert_eq!(subs_of(store.zset_keyspace(), "z"), left, "{layout}");
        assert_eq!(c.cmd(&["TYPE", "z"]), R::S("string".into()));
        // Never written again: on a layout with a key directory SCAN passes it and purges.
        let scanned = scan_all(&mut c, &[]);
        assert_eq!(
            scanned.into_iter().collect::<Vec<_>>(),
            ["h", "z"],
            "{layout}"
        );
        let left = subs_of(store.hash_keyspace(), "s");
        match layout.order() {
            scree::Order::Total => assert_eq!(left, 1, "{layout}: kept until written"),
            _ => assert_eq!(left, 0, "{layout}: purged by SCAN"),
        }
        rt.block_on(srv.shutdown()).unwrap();
    }
}

/// An array reply of bulk strings as strings (panics on anything else).
fn strings(r: R) -> Vec<String> {
    let R::A(Some(items)) = r else {
        panic!("not an array: {r:?}")
    };
    items
        .into_iter()
        .map(|i| match i {
            R::B(Some(v)) => String::from_utf8(v).unwrap(),
            other => panic!("not a bulk string: {other:?}"),
        })
        .collect()
}

/// `HGETALL` (RESP2) as a map.
fn hgetall(c: &mut Client, key: &str) -> std::collections::BTreeMap<String, String> {
    let flat = strings(c.cmd(&["HGETALL", key]));
    flat.chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A plain `SET` (and `SET EX`, `MSET`) over a hash or sorted set writes the string's header
/// (blind where there is no key directory): the string is what every command sees, a collection re-created under the name
/// shows none of the old elements, and the old sub-entries, orphaned, are gone from
/// `redis.hash` and `redis.zset` after a compaction (the orphan filter), while live ones all
/// stay; an expired hash never written again loses its fields too. Every layout.
#[test]
fn sets_over_collections_leave_orphans_that_compaction_drops() {
    for layout in scree::Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let rt = rt();
        let (srv, mut c) = serve_on(&rt, dir.path(), layout);
        let store = &srv.shared().store;
        let ok = || R::S("OK".into());
        // Pads spread over the hash space, written in both tables below, so that the
        // compaction merges the tables (a table moved down whole is not rewritten).
        let pads = |c: &mut Client, v: &str| {
            for i in 0..100 {
                c.cmd(&["HSET", &format!("hpad:{i}"), "f", v]);
                c.cmd(&["ZADD", &format!("zpad:{i}"), "1", v]);
            }
        };
        pads(&mut c, "1");
        assert_eq!(c.cmd(&["HSET", "h", "a", "1", "b", "2", "c", "3"]), R::I(3));
        assert_eq!(c.cmd(&["ZADD", "z", "1", "a", "2", "b"]), R::I(2));
        assert_eq!(c.cmd(&["HSET", "m", "x", "1"]), R::I(1));
        assert_eq!(c.cmd(&["HSET", "e", "a", "1", "b", "2"]), R::I(2));
        assert_eq!(c.cmd(&["PEXPIRE", "e", "1"]), R::I(1));
        let live: Vec<(String, String)> = (0..40)
            .map(|i| (format!("f{i}"), format!("v{i}")))
            .collect();
        for (f, v) in &live {
            assert_eq!(c.cmd(&["HSET", "live", f, v]), R::I(1));
        }
        assert_eq!(c.cmd(&["ZADD", "zl", "1", "a", "2", "b"]), R::I(2));
        store.db().flush().unwrap();

        assert_eq!(c.cmd(&["SET", "h", "str"]), ok());
        assert_eq!(c.cmd(&["SET", "z", "str", "EX", "100"]), ok());
        assert_eq!(c.cmd(&["MSET", "m", "s1", "k2", "s2"]), ok());
        for k in ["h", "z", "m"] {
            assert_eq!(c.cmd(&["TYPE", k]), R::S("string".into()), "{layout}: {k}");
        }
        assert_eq!(c.cmd(&["GET", "h"]), b("str"));
        assert_eq!(c.cmd(&["GET", "m"]), b("s1"));
        assert_eq!(c.cmd(&["HGETALL", "h"]), R::E(WRONGTYPE.into()));
        assert_eq!(c.cmd(&["HLEN", "m"]), R::E(WRONGTYPE.into()));
        assert_eq!(c.cmd(&["ZRANGE", "z", "0", "-1"]), R::E(WRONGTYPE.into()));
        let ttl = c.cmd(&["TTL", "z"]);
        assert!(matches!(ttl, R::I(99..=100)), "{layout}: {ttl:?}");
        // Written blind: the old sub-entries are still there, unreachable (read first: gone).
        let blind = set_is_blind(layout);
        assert_eq!(
            subs_of(store.hash_keyspace(), "h"),
            if blind { 3 } else { 0 },
            "{layout}"
        );
        assert_eq!(
            subs_of(store.zset_keyspace(), "z"),
            if blind { 4 } else { 0 },
            "{layout}"
        );
        // Re-created under the same names: none of the old elements shows.
        assert_eq!(c.cmd(&["DEL", "h", "z"]), R::I(2));
        assert_eq!(c.cmd(&["HSET", "h", "d", "4"]), R::I(1));
        assert_eq!(c.cmd(&["HLEN", "h"]), R::I(1));
        assert_eq!(
            hgetall(&mut c, "h"),
            [("d".to_string(), "4".to_string())].into()
        );
        assert_eq!(c.cmd(&["HGET", "h", "a"]), R::B(None));
        assert_eq!(c.cmd(&["ZADD", "z", "7", "n"]), R::I(1));
        assert_eq!(strings(c.cmd(&["ZRANGE", "z", "0", "-1"])), ["n"]);
        assert_eq!(c.cmd(&["ZSCORE", "z", "a"]), R::B(None));
        assert_eq!(c.cmd(&["TYPE", "e"]), R::S("none".into()));
        assert_eq!(c.cmd(&["HSET", "live", "f0", "v0"]), R::I(0));
        pads(&mut c, "2");
        store.db().flush().unwrap();
        store.db().compact().unwrap();

        // The orphans are gone, the live sub-entries all stay.
        assert_eq!(subs_of(store.hash_keyspace(), "h"), 1, "{layout}: h");
        assert_eq!(subs_of(store.zset_keyspace(), "z"), 2, "{layout}: z");
        assert_eq!(subs_of(store.hash_keyspace(), "m"), 0, "{layout}: m");
        assert_eq!(subs_of(store.hash_keyspace(), "e"), 0, "{layout}: e");
        assert_eq!(subs_of(store.hash_keyspace(), "live"), 40, "{layout}");
        assert_eq!(subs_of(store.zset_keyspace(), "zl"), 4, "{layout}");
        assert_eq!(hgetall(&mut c, "live"), live.into_iter().collect());
        assert_eq!(hgetall(&mut c, "h"), [("d".into(), "4".into())].into());
        assert_eq!(strings(c.cmd(&["ZRANGE", "zl", "0", "-1"])), ["a", "b"]);
        assert_eq!(strings(c.cmd(&["ZRANGE", "z", "0", "-1"])), ["n"]);
        for i in 0..100 {
            let (h, z) = (format!("hpad:{i}"), format!("zpad:{i}"));
            assert_eq!(c.cmd(&["HGET", &h, "f"]), b("2"), "{layout}: {h}");
            assert_eq!(subs_of(store.zset_keyspace(), &z), 4, "{layout}: {z}");
        }
        rt.block_on(srv.shutdown()).unwrap();
    }
}

/// Random commands on a few keys against a model (BTreeMaps): after compactions every live
/// field and member reads back, and the keyspaces hold exactly the live sub-entries (none
/// dropped, no orphan left), on every layout (on `lightweight`, orphans at the deepest level
/// wait for its next rewrite).
#[test]
fn the_orphan_filter_keeps_every_live_sub_entry() {
    use std::collections::BTreeMap;
    #[derive(Debug, Clone, PartialEq)]
    enum V {
        Str(String),
        Hash(BTreeMap<String, String>),
        Zset(BTreeMap<String, i64>),
    }
    for layout in scree::Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let rt = rt();
        let (srv, mut c) = serve_on(&rt, dir.path(), layout);
        let store = &srv.shared().store;
        let mut model: BTreeMap<String, V> = BTreeMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ layout.to_string().len() as u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for step in 0..3000 {
            let key = format!("k{}", rnd(24));
            let item = format!("i{}", rnd(12));
            let val = format!("{}", rnd(1000));
            let cur = model.get(&key).cloned();
            match rnd(10) {
                0 | 1 => {
                    c.cmd(&["SET", &key, &val]);
                    model.insert(key, V::Str(val));
                }
                2..=4 => {
                    let r = c.cmd(&["HSET", &key, &item, &val]);
                    match cur {
                        None | Some(V::Hash(_)) => {
                            let mut h = match cur {
                                Some(V::Hash(h)) => h,
                                _ => BTreeMap::new(),
                            };
                            let new = h.insert(item, val).is_none();
                            assert_eq!(r, R::I(new.into()), "{layout} step {step}");
                            model.insert(key, V::Hash(h));
                        }
                        _ => assert_eq!(r, R::E(WRONGTYPE.into())),
                    }
                }
                5 | 6 => {
                    let score = rnd(100) as i64;
                    let r = c.cmd(&["ZADD", &key, &score.to_string(), &item]);
                    match cur {
                        None | Some(V::Zset(_)) => {
                            let mut z = match cur {
                                Some(V::Zset(z)) => z,
                                _ => BTreeMap::new(),
                            };
                            let new = z.insert(item, score).is_none();
                            assert_eq!(r, R::I(new.into()), "{layout} step {step}");
                            model.insert(key, V::Zset(z));
                        }
                        _ => assert_eq!(r, R::E(WRONGTYPE.into())),
                    }
                }
                7 => {
                    let r = match &cur {
                        Some(V::Zset(_)) => c.cmd(&["ZREM", &key, &item]),
                        _ => c.cmd(&["HDEL", &key, &item]),
                    };
                    let gone = match model.get_mut(&key) {
                        Some(V::Hash(h)) => h.remove(&item).is_some(),
                        Some(V::Zset(z)) => z.remove(&item).is_some(),
                        _ => false,
                    };
                    if let Some(V::Str(_)) = cur {
                        assert_eq!(r, R::E(WRONGTYPE.into()));
                    } else {
                        assert_eq!(r, R::I(gone.into()), "{layout} step {step}");
                    }
                    if matches!(model.get(&key), Some(V::Hash(h)) if h.is_empty())
                        || matches!(model.get(&key), Some(V::Zset(z)) if z.is_empty())
                    {
                        model.remove(&key);
                    }
                }
                8 => {
                    c.cmd(&["DEL", &key]);
                    model.remove(&key);
                }
                _ => {
                    // Expires at once.
                    c.cmd(&["PEXPIRE", &key, "1"]);
                    std::thread::sleep(Duration::from_millis(2));
                    model.remove(&key);
                }
            }
            if step % 500 == 499 {
                store.db().flush().unwrap();
            }
            if step % 1000 == 999 {
                store.db().compact().unwrap();
            }
        }
        store.db().flush().unwrap();
        store.db().compact().unwrap();
        let (mut fields, mut members) = (0, 0);
        for i in 0..24 {
            let key = format!("k{i}");
            let want = model.get(&key);
            match want {
                None => assert_eq!(c.cmd(&["TYPE", &key]), R::S("none".into())),
                Some(V::Str(v)) => assert_eq!(c.cmd(&["GET", &key]), b(v)),
                Some(V::Hash(h)) => {
                    fields += h.len();
                    assert_eq!(&hgetall(&mut c, &key), h, "{layout}: {key}");
                }
                Some(V::Zset(z)) => {
                    members += z.len();
                    let mut by_score: Vec<(i64, &String)> =
                        z.iter().map(|(m, s)| (*s, m)).collect();
                    by_score.sort();
                    let want: Vec<String> = by_score.into_iter().map(|p| p.1.clone()).collect();
                    assert_eq!(
                        strings(c.cmd(&["ZRANGE", &key, "0", "-1"])),
                        want,
                        "{layout}: {key}"
                    );
                }
            }
        }
        let count = |ks: &scree::Keyspace| {
            (0..24)
                .map(|i| subs_of(ks, &format!("k{i}")))
                .sum::<usize>()
        };
        let (h, z) = (count(store.hash_keyspace()), count(store.zset_keyspace()));
        if layout == scree::Layout::Lightweight {
            // Its deepest level takes compactions as appended runs and is rewritten only
            // when a DTable is divided: orphans that reached it stay until then.
            assert!(h >= fields && z >= 2 * members, "{layout}: {h} {z}");
        } else {
            assert_eq!(h, fields, "{layout}: hash fields");
            assert_eq!(z, 2 * members, "{layout}: zset entries");
        }
        rt.block_on(srv.shutdown()).unwrap();
    }
}

/// The RESP request of `args`.
fn request(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Pipelines whose runs of plain `SET`s are written as one batch (runs past the run bound,
/// a key twice in one run, runs broken by every other kind of write and read) reply as the
/// same commands one by one would, against a model of the live keys, on every layout; the
/// key directory stays exact (`SCAN`, `DBSIZE`), across a reopen.
#[test]
fn pipelined_set_runs_match_a_model_and_keep_the_directory_exact() {
    use std::collections::BTreeMap;
    #[derive(Clone, PartialEq)]
    enum V {
        Str(String),
        Hash,
    }
    for layout in scree::Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let rt = rt();
        let (srv, mut c) = serve_on(&rt, dir.path(), layout);
        let mut model: BTreeMap<String, V> = BTreeMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..40 {
            let mut buf = Vec::new();
            let mut want = Vec::new();
            let len = if round % 10 == 0 { 700 } else { 1 + rnd(60) };
            for i in 0..len {
                let k = format!("k{}", rnd(150));
                let v = format!("v{round}.{i}");
                let op = rnd(100);
                let r = match op {
                    0..=59 => {
                        buf.extend(request(&["SET", &k, &v]));
                        model.insert(k, V::Str(v));
                        R::S("OK".into())
                    }
                    60..=64 => {
                        buf.extend(request(&["SET", &k, &v, "NX"]));
                        match model.entry(k) {
                            std::collections::btree_map::Entry::Occupied(_) => R::B(None),
                            std::collections::btree_map::Entry::Vacant(e) => {
                                e.insert(V::Str(v));
                                R::S("OK".into())
                            }
                        }
                    }
                    65..=69 => {
                        buf.extend(request(&["DEL", &k]));
                        R::I(i64::from(model.remove(&k).is_some()))
                    }
                    70..=79 => {
                        buf.extend(request(&["GET", &k]));
                        match model.get(&k) {
                            Some(V::Str(s)) => b(s),
                            Some(V::Hash) => R::E(
                                "WRONGTYPE Operation against a key holding the wrong kind of value"
                                    .into(),
                            ),
                            None => R::B(None),
                        }
                    }
                    80..=84 => {
                        buf.extend(request(&["HSET", &k, "f", &v]));
                        match model.get(&k) {
                            Some(V::Str(_)) => R::E(
                                "WRONGTYPE Operation against a key holding the wrong kind of value"
                                    .into(),
                            ),
                            Some(V::Hash) => R::I(0),
                            None => {
                                model.insert(k, V::Hash);
                                R::I(1)
                            }
                        }
                    }
                    85..=89 => {
                        buf.extend(request(&["EXPIRE", &k, "-1"]));
                        R::I(i64::from(model.remove(&k).is_some()))
                    }
                    90..=94 => {
                        let k2 = format!("k{}", rnd(150));
                        buf.extend(request(&["MSET", &k, &v, &k2, &v]));
                        model.insert(k, V::Str(v.clone()));
                        model.insert(k2, V::Str(v));
                        R::S("OK".into())
                    }
                    _ => {
                        buf.extend(request(&["EXISTS", &k]));
                        R::I(i64::from(model.contains_key(&k)))
                    }
                };
                want.push(r);
            }
            c.w.write_all(&buf).unwrap();
            for (i, w) in want.iter().enumerate() {
                assert_eq!(&c.read(), w, "{layout}: round {round}, reply {i}");
            }
        }
        let live: std::collections::BTreeSet<String> = model.keys().cloned().collect();
        assert_eq!(scan_all(&mut c, &[]), live, "{layout}: SCAN");
        assert_eq!(c.cmd(&["DBSIZE"]), R::I(live.len() as i64), "{layout}");
        rt.block_on(srv.shutdown()).unwrap();
        let (srv, mut c) = serve_on(&rt, dir.path(), layout);
        assert_eq!(scan_all(&mut c, &[]), live, "{layout}: SCAN after reopen");
        for (k, v) in &model {
            if let V::Str(s) = v {
                assert_eq!(c.cmd(&["GET", k]), b(s), "{layout}: {k} after reopen");
            }
        }
        rt.block_on(srv.shutdown()).unwrap();
    }
}
