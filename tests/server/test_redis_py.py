"""`scree serve` driven by redis-py, redis-cli and redis-benchmark, unchanged."""

import random
import shutil
import signal
import subprocess
import threading
import time

import pytest
import redis


def test_strings_and_errors(server):
    r = server.client()
    assert r.ping()
    assert r.set("k", "v")
    assert r.get("k") == b"v"
    assert r.set("k", "w", nx=True) is None
    assert r.set("k", "w", xx=True, get=True) == b"v"
    assert r.incr("n") == 1 and r.incrby("n", 9) == 10 and r.decr("n") == 9
    assert r.append("k", "xyz") == 4 and r.strlen("k") == 4
    assert r.mset({"a": "1", "b": "2"})
    assert r.mget("a", "b", "c") == [b"1", b"2", None]
    assert r.exists("a", "b", "c") == 2
    assert r.delete("a", "b", "c") == 2
    assert r.getdel("k") == b"wxyz" and r.get("k") is None
    with pytest.raises(redis.ResponseError, match="value is not an integer or out of range"):
        r.incrby("n", "x")
    r.set("s", "str")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE Operation against a key"):
        r.hget("s", "f")
    with pytest.raises(redis.ResponseError, match="^unknown command 'NOSUCH'"):
        r.execute_command("NOSUCH", "x")
    # The connection is still usable after errors.
    assert r.get("s") == b"str"
    assert r.type("s") == b"string" and r.type("none") == b"none"


def test_pipelines_keep_order_and_apply_everything(server):
    r = server.client()
    p = r.pipeline(transaction=False)
    model = {}
    rng = random.Random(7)
    for i in range(3000):
        k = f"k{rng.randrange(500)}"
        v = str(rng.randrange(10**9))
        p.set(k, v)
        model[k] = v.encode()
        p.get(k)
    out = p.execute()
    for i in range(0, len(out), 2):
        assert out[i] is True
    # Each GET saw its own SET (replies in request order).
    assert all(out[i + 1] is not None for i in range(0, len(out), 2))
    got = r.mget(list(model))
    assert dict(zip(model, got)) == model
    # An error inside a pipeline does not stop the others.
    p = r.pipeline(transaction=False)
    p.set("x", "1").incr("k0_not_int_maybe").hset("x", "f", "v").get("x")
    res = p.execute(raise_on_error=False)
    assert res[0] is True and isinstance(res[2], redis.ResponseError) and res[3] == b"1"


def test_resp3(server):
    r = server.client(protocol=3)
    assert r.hset("h", mapping={"a": "1", "b": "2"}) == 2
    assert r.hgetall("h") == {b"a": b"1", b"b": b"2"}
    r.zadd("z", {"m": 1.5, "n": -2})
    assert r.zscore("z", "m") == 1.5
    assert r.zrange("z", 0, -1, withscores=True) == [[b"n", -2.0], [b"m", 1.5]] or \
        r.zrange("z", 0, -1, withscores=True) == [(b"n", -2.0), (b"m", 1.5)]
    assert r.get("nothing") is None
    hello = r.execute_command("HELLO", "3")
    assert hello[b"proto"] == 3


def test_expiry(server):
    r = server.client()
    r.set("k", "v", px=200)
    r.hset("h", "f", "v")
    assert r.pexpire("h", 200)
    r.set("keep", "v", ex=100)
    assert 99 <= r.ttl("keep") <= 100
    assert r.pttl("none") == -2 and r.ttl("s") == -2
    r.set("s", "v")
    assert r.ttl("s") == -1
    assert r.expire("s", 100, nx=True) and not r.expire("s", 50, gt=True)
    assert r.persist("s") and r.ttl("s") == -1
    assert r.get("k") == b"v"
    time.sleep(0.35)
    assert r.get("k") is None and r.exists("k", "h") == 0
    assert r.hgetall("h") == {} and r.type("h") == b"none"
    assert r.get("keep") == b"v"
    assert r.expire("keep", -1) and r.get("keep") is None


def test_hashes(server):
    r = server.client()
    assert r.hset("h", mapping={"f1": "1", "f2": "2"}) == 2
    assert r.hset("h", "f1", "x") == 0
    assert r.hmset("h", {"f3": "3"})
    assert r.hget("h", "f1") == b"x" and r.hget("h", "no") is None
    assert r.hmget("h", ["f2", "no", "f3"]) == [b"2", None, b"3"]
    assert r.hlen("h") == 3 and r.hexists("h", "f2") and not r.hexists("h", "no")
    assert r.hincrby("h", "f2", 40) == 42 and r.hincrby("h", "new", -1) == -1
    with pytest.raises(redis.ResponseError, match="hash value is not an integer"):
        r.hincrby("h", "f1", 1)
    assert r.hgetall("h") == {b"f1": b"x", b"f2": b"42", b"f3": b"3", b"new": b"-1"}
    assert r.hdel("h", "f1", "f1", "no") == 1
    assert r.hdel("h", "f2", "f3", "new") == 3
    assert r.exists("h") == 0  # the last field took the key with it
    # Many fields, binary ones too.
    fields = {bytes([i % 256, 0, 255 - i % 256]) + str(i).encode(): str(i) for i in range(500)}
    assert r.hset("big", mapping=fields) == 500
    assert r.hlen("big") == 500
    assert {k: v.decode() for k, v in r.hgetall("big").items()} == fields


def test_sorted_sets(server):
    r = server.client()
    assert r.zadd("z", {"a": 1, "b": 2, "c": 3, "d": -1.5}) == 4
    assert r.zadd("z", {"a": 5}, ch=True) == 1
    assert r.zadd("z", {"a": 1}, nx=True) == 0
    assert r.zcard("z") == 4
    assert r.zrange("z", 0, -1) == [b"d", b"b", b"c", b"a"]
    assert [tuple(x) for x in r.zrange("z", 1, 2, withscores=True)] == [(b"b", 2.0), (b"c", 3.0)]
    assert r.zrange("z", 0, 0, desc=True) == [b"a"]
    assert r.zrangebyscore("z", "(2", "+inf") == [b"c", b"a"]
    assert r.zrangebyscore("z", "-inf", "+inf", start=1, num=2) == [b"b", b"c"]
    assert [tuple(x) for x in r.zrangebyscore("z", 2, 3, withscores=True)] == [
        (b"b", 2.0), (b"c", 3.0)]
    assert r.zscore("z", "d") == -1.5 and r.zscore("z", "nope") is None
    assert r.zadd("z", {"a": 2}, incr=True) == 7.0
    assert r.zrem("z", "a", "nope") == 1 and r.zcard("z") == 3
    with pytest.raises(redis.ResponseError, match="value is not a valid float"):
        r.execute_command("ZADD", "z", "x", "m")
    with pytest.raises(redis.ResponseError, match="min or max is not a float"):
        r.zrangebyscore("z", "x", 1)


def test_scan_type_dbsize_flushdb(server):
    r = server.client()
    for i in range(300):
        r.set(f"user:{i}", i)
    r.hset("h", "f", "v")
    r.zadd("z", {"m": 1})
    seen = list(r.scan_iter(match="user:*", count=17))
    assert len(seen) == 300 and len(set(seen)) == 300
    assert set(r.scan_iter(_type="hash")) == {b"h"}
    assert r.dbsize() == 302
    with pytest.raises(redis.ResponseError, match="invalid cursor"):
        r.scan(cursor=987654321)
    assert r.flushdb()
    assert r.dbsize() == 0 and list(r.scan_iter()) == []


def test_server_commands(server):
    r = server.client()
    info = r.info()
    assert info["redis_version"] and "connected_clients" in info
    assert "layout" in r.info("scree")
    assert r.config_get("appendonly") == {"appendonly": "yes"}
    assert r.config_get("save") == {"save": ""}
    assert r.command_count() > 40
    assert r.save()
    assert r.client_id() > 0
    assert r.client_setname("me") and r.client_getname() in ("me", b"me")
    assert "name=me" in r.execute_command("CLIENT", "INFO").decode()
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        r.execute_command("SELECT", "1")


def test_auth(make_server):
    s = make_server("--requirepass", "s3cret")
    r = s.client()
    with pytest.raises(redis.AuthenticationError):
        r.get("k")
    with pytest.raises(redis.AuthenticationError):
        s.client(password="wrong").ping()
    ok = s.client(password="s3cret")
    assert ok.set("k", "v") and ok.get("k") == b"v"
    assert s.client(username="default", password="s3cret", protocol=3).get("k") == b"v"


def test_protected_mode_refuses_public_bind(tmp_path):
    from conftest import scree_bin
    p = subprocess.run([scree_bin(), "serve", "--db", str(tmp_path / "db"),
                        "--bind", "0.0.0.0:0"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "protected mode" in p.stderr


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli not installed")
def test_redis_cli_smoke(server):
    def cli(*a):
        return subprocess.run(["redis-cli", "-p", str(server.port), *a],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    assert cli("PING") == "PONG"
    assert cli("SET", "greeting", "hello world") == "OK"
    assert cli("GET", "greeting") == "hello world"
    assert cli("HSET", "h", "f", "v") == "1"
    assert cli("HGETALL", "h") == "f\nv"
    assert "redis_version" in cli("INFO", "server")
    assert cli("DBSIZE") == "2"


@pytest.mark.skipif(shutil.which("redis-benchmark") is None, reason="redis-benchmark not installed")
def test_redis_benchmark_completes_without_errors(server):
    p = subprocess.run(["redis-benchmark", "-p", str(server.port), "-t", "set,get,incr,hset,mset",
                        "-P", "16", "-n", "20000", "-q"], capture_output=True, text=True,
                       timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "ERR" not in out and "rror" not in out, out
    for t in ("SET", "GET", "INCR", "HSET", "MSET"):
        assert f"{t}" in out and "requests per second" in out, out
    r = server.client()
    # redis-benchmark's HSET writes fields of one hash, `myhash`.
    assert r.type("myhash") == b"hash" and r.hlen("myhash") > 0


def test_kill_9_under_load_loses_nothing_acknowledged(make_server):
    """Writers SET and INCR with --appendfsync always; SIGKILL mid-load; after a restart every
    acknowledged SET is there and every counter is at least its acknowledged value."""
    s = make_server("--appendfsync", "always", name="k9")
    acked_sets = {}
    acked_incr = {}
    stop = threading.Event()
    lock = threading.Lock()

    def writer(w: int):
        r = s.client(socket_timeout=10)
        i = 0
        try:
            while not stop.is_set():
                k = f"w{w}:k{i}"
                v = f"v{i}"
                if r.set(k, v):
                    with lock:
                        acked_sets[k] = v.encode()
                n = r.incr(f"ctr{w}")
                with lock:
                    acked_incr[f"ctr{w}"] = n
                p = r.pipeline(transaction=False)
                for j in range(5):
                    p.set(f"w{w}:p{i}:{j}", j)
                for ok, j in zip(p.execute(), range(5)):
                    if ok:
                        with lock:
                            acked_sets[f"w{w}:p{i}:{j}"] = str(j).encode()
                i += 1
        except (redis.ConnectionError, redis.TimeoutError, ConnectionResetError):
            pass

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait()
    stop.set()
    for t in threads:
        t.join()
    assert len(acked_sets) > 100, len(acked_sets)
    s.start()
    r = s.client()
    keys = list(acked_sets)
    for i in range(0, len(keys), 500):
        chunk = keys[i:i + 500]
        got = r.mget(chunk)
        missing = [k for k, g in zip(chunk, got) if g != acked_sets[k]]
        assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:3]}"
    for k, n in acked_incr.items():
        assert int(r.get(k)) >= n, (k, n)


def test_thousands_of_connections(server):
    """2,000 clients connected at once, each served (the default cap is 10,000)."""
    import socket
    socks = []
    try:
        for _ in range(2000):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            socks.append(s)
        for s in socks:
            s.sendall(b"PING\r\n")
        for s in socks:
            assert s.recv(16) == b"+PONG\r\n"
        info = server.client().info("clients")
        assert info["connected_clients"] >= 2000
    finally:
        for s in socks:
            s.close()
