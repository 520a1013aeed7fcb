//! The network side: the listener with its client cap, one task per connection (read,
//! parse every complete request, run them, sync the WAL if `always` asks, write the replies),
//! the `everysec` syncer, and the shutdown that stops accepting, lets connections finish the
//! requests they read, syncs and flushes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::commands::{exec, exec_sets, is_plain_set, Conn, Shared};
use crate::resp::{self, Args, Parsed, Reply};
use crate::store::Store;
use crate::{Config, Fsync};

/// Replies buffered past this many bytes are written before more requests run.
const OUT_HIGH_WATER: usize = 1 << 20;
/// How long shutdown waits for connections to finish the requests they hold.
const DRAIN: Duration = Duration::from_secs(5);

/// A server started by [`start`].
pub struct Running {
    addr: std::net::SocketAddr,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<anyhow::Result<()>>,
    shared: Arc<Shared>,
}

impl Running {
    /// The address it listens on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// The shared state (tests look at the store).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops accepting, lets connections finish, syncs the WAL and flushes; returns when the
    /// database is closed.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        drop(self.shared);
        self.done.await?
    }
}

/// Opens the database and starts serving on the current tokio runtime.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    config.check()?;
    let mut opts = scree::Options::default();
    opts.block_cache_bytes = config.block_cache_bytes;
    opts.mmap_reads = config.mmap_reads;
    let mut ks = scree::KeyspaceOptions::new(config.layout);
    ks.write_buffer_bytes = config.write_buffer_bytes;
    let (path, layout, directory) = (config.db.clone(), config.layout, config.key_directory);
    let store = tokio::task::spawn_blocking(move || -> anyhow::Result<Store> {
        let db = scree::Db::open(&path, opts)
            .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?;
        Store::open(db, layout, &ks, directory)
    })
    .await??;
    let listener = TcpListener::bind(config.bind)
        .await
        .map_err(|e| anyhow::anyhow!("binding {}: {e}", config.bind))?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared::new(store, config, addr.port()));
    let (stop, stop_rx) = watch::channel(false);
    let done = tokio::spawn(serve(listener, shared.clone(), stop_rx));
    Ok(Running {
        addr,
        stop,
        done,
        shared,
    })
}

/// `scree serve`: serves until SIGTERM or SIGINT, then shuts down cleanly.
pub fn run(config: Config) -> anyhow::Result<()> {
    config.check()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let fsync = config.appendfsync;
        let layout = config.layout;
        let server = start(config).await?;
        eprintln!(
            "scree serve: listening on {} (layout {layout}, appendfsync {})",
            server.addr(),
            match fsync {
                Fsync::Always => "always",
                Fsync::EverySec => "everysec",
                Fsync::No => "no",
            }
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => eprintln!("scree serve: SIGTERM, shutting down"),
            _ = tokio::signal::ctrl_c() => eprintln!("scree serve: SIGINT, shutting down"),
        }
        server.shutdown().await?;
        eprintln!("scree serve: data synced and flushed; bye");
        Ok(())
    })
}

async fn serve(
    listener: TcpListener,
    sh: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut conns = JoinSet::new();
    if sh.config.appendfsync == Fsync::EverySec {
        let (sh2, mut stop2) = (sh.clone(), stop.clone());
        conns.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop2.changed() => return,
                }
                if sh2.unsynced.swap(0, Ordering::Relaxed) > 0 {
                    let sh3 = sh2.clone();
                    let r = tokio::task::spawn_blocking(move || sh3.store.sync_wal()).await;
                    if !matches!(r, Ok(Ok(()))) {
                        eprintln!("scree serve: everysec WAL sync failed; writes will fail");
                    }
                }
            }
        });
    }
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            r = listener.accept() => {
                let (sock, peer) = match r {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of descriptors and the like: wait a little, keep serving.
                        eprintln!("scree serve: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                sh.connections.fetch_add(1, Ordering::Relaxed);
                if sh.clients.load(Ordering::SeqCst) >= sh.config.maxclients {
                    sh.rejected.fetch_add(1, Ordering::Relaxed);
                    conns.spawn(async move {
                        let mut sock = sock;
                        let _ = sock.write_all(b"-ERR max number of clients reached\r\n").await;
                    });
                    continue;
                }
                sh.clients.fetch_add(1, Ordering::SeqCst);
                let (sh2, stop2) = (sh.clone(), stop.clone());
                conns.spawn(async move {
                    connection(&sh2, sock, peer, stop2).await;
                    sh2.clients.fetch_sub(1, Ordering::SeqCst);
                });
                // Reap finished tasks so the set does not grow with every connection.
                while conns.try_join_next().is_some() {}
            }
        }
    }
    drop(listener);
    // Connections see the stop, finish the requests they read, and end.
    let drained =
        tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        conns.abort_all();
    }
    let sh2 = sh.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        sh2.store
            .sync_wal()
            .map_err(|e| anyhow::anyhow!("{:?}", e.reply()))?;
        sh2.store
            .flush()
            .map_err(|e| anyhow::anyhow!("{:?}", e.reply()))?;
        Ok(())
    })
    .await??;
    Ok(())
}

/// Writes the replies so far, after syncing the WAL when `always` asks for it and a write ran.
/// `false` if the connection must close (the sync or the socket failed: no reply is sent for
/// writes that are not durable as promised).
async fn flush_out(sh: &Shared, c: &mut Conn, sock: &mut TcpStream, out: &mut Vec<u8>) -> bool {
    if c.wrote && sh.config.appendfsync == Fsync::Always {
        c.wrote = false;
        if sh.store.sync_wal().is_err() {
            return false;
        }
    }
    if out.is_empty() {
        return true;
    }
    let ok = sock.write_all(out).await.is_ok();
    out.clear();
    ok
}

/// Most `SET`s written as one batch ([`SetRun`]).
const SET_RUN_MAX: usize = 256;
/// Most key and value bytes of the `SET`s written as one batch.
const SET_RUN_BYTES: usize = 1 << 20;

/// A run of plain `SET key value` requests of one pipeline, not yet run: each request's frame
/// with the ranges of its key and value. Run as one write batch by [`exec_sets`] (one trip
/// through the engine's write group, its WAL record and its memtable inserts, instead of one
/// per `SET`: with two connection threads, a write per `SET` kept them queueing behind each
/// other's writes); every `SET` of the run gets the reply of that write.
#[derive(Default)]
struct SetRun {
    reqs: Vec<(Bytes, std::ops::Range<usize>, std::ops::Range<usize>)>,
    bytes: usize,
}

impl SetRun {
    fn push(&mut self, frame: Bytes, key: std::ops::Range<usize>, value: std::ops::Range<usize>) {
        self.bytes += key.len() + value.len();
        self.reqs.push((frame, key, value));
    }

    fn full(&self) -> bool {
        self.reqs.len() >= SET_RUN_MAX || self.bytes >= SET_RUN_BYTES
    }

    /// Runs the held `SET`s, if any, and appends their replies to `out`.
    fn run(&mut self, sh: &Shared, c: &mut Conn, out: &mut Vec<u8>) {
        if self.reqs.is_empty() {
            return;
        }
        let pairs: Vec<(&[u8], &[u8])> = self
            .reqs
            .iter()
            .map(|(f, k, v)| {
                (
                    f.get(k.clone()).unwrap_or_default(),
                    f.get(v.clone()).unwrap_or_default(),
                )
            })
            .collect();
        let reply = exec_sets(sh, c, &pairs);
        for _ in 0..pairs.len() {
            resp::encode(&reply, c.proto, out);
        }
        self.reqs.clear();
        self.bytes = 0;
    }
}

async fn connection(
    sh: &Shared,
    mut sock: TcpStream,
    peer: std::net::SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let _ = sock.set_nodelay(true);
    let laddr = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
    let mut c = Conn::new(id, peer.to_string(), laddr, sh.config.requirepass.is_none());
    let limits = sh.config.limits;
    let idle = (sh.config.timeout_secs > 0).then(|| Duration::from_secs(sh.config.timeout_secs));
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut sets = SetRun::default();
    loop {
        // Run every complete request in the buffer (a pipeline), then reply at once. Runs of
        // plain `SET key value` are held back and written as one batch (`SetRun`) when
        // another command, the end of the buffer or the run's bound comes.
        loop {
            match resp::parse(&buf, &limits) {
                Ok(None) => break,
                Ok(Some(Parsed::Empty { consumed })) => buf.advance(consumed),
                Ok(Some(Parsed::Command { consumed, args })) => {
                    let frame = buf.split_to(consumed);
                    let reply = match &args {
                        Args::Ranges(r) => {
                            let argv: Vec<&[u8]> = r
                                .iter()
                                .map(|r| frame.get(r.clone()).unwrap_or_default())
                                .collect();
                            if is_plain_set(&c, &argv) {
                                if let (Some(k), Some(v)) = (r.get(1), r.get(2)) {
                                    sets.push(frame.freeze(), k.clone(), v.clone());
                                }
                                if sets.full() {
                                    sets.run(sh, &mut c, &mut out);
                                }
                                continue;
                            }
                            sets.run(sh, &mut c, &mut out);
                            exec(sh, &mut c, &argv)
                        }
                        Args::Owned(o) => {
                            sets.run(sh, &mut c, &mut out);
                            let argv: Vec<&[u8]> = o.iter().map(|a| a.as_slice()).collect();
                            exec(sh, &mut c, &argv)
                        }
                    };
                    resp::encode(&reply, c.proto, &mut out);
                    if c.quit {
                        let _ = flush_out(sh, &mut c, &mut sock, &mut out).await;
                        return;
                    }
                    if out.len() > OUT_HIGH_WATER
                        && !flush_out(sh, &mut c, &mut sock, &mut out).await
                    {
                        return;
                    }
                }
                Err(e) => {
                    // The requests before it ran; their replies go first, then the error, and
                    // the connection closes (the rest of the stream cannot be framed).
                    sets.run(sh, &mut c, &mut out);
                    resp::encode(&Reply::err(e), c.proto, &mut out);
                    let _ = flush_out(sh, &mut c, &mut sock, &mut out).await;
                    return;
                }
            }
        }
        sets.run(sh, &mut c, &mut out);
        if !flush_out(sh, &mut c, &mut sock, &mut out).await {
            return;
        }
        if *stop.borrow() {
            return;
        }
        // A large bulk string on its way: make room once instead of growing step by step.
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(buf.len().clamp(16 * 1024, 1 << 20));
        }
        let read = async {
            match idle {
                Some(t) => tokio::time::timeout(t, sock.read_buf(&mut buf)).await.ok(),
                None => Some(sock.read_buf(&mut buf).await),
            }
        };
        tokio::select! {
            r = read => match r {
                None => return,               // idle timeout
                Some(Ok(0)) | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            _ = stop.changed() => return,
        }
    }
}
