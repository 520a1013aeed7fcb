"""Sharding through twemproxy (docs/cluster.md): scripts/cluster.sh starts three `scree serve`
shards and nutcracker (ketama, murmur); 100,000 keys written through the proxy land on every
shard; one shard is killed with SIGKILL and restarted; every key reads back through the proxy.
Skipped when nutcracker is not installed (.ci/run installs it).

twemproxy closes a connection on a command it does not know: the proxy's client speaks RESP2
(no HELLO) and announces no library (no CLIENT SETINFO), as redis-py 8 otherwise does."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis

from conftest import free_port, scree_bin

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster.sh"
KEYS = 100_000

pytestmark = pytest.mark.skipif(shutil.which("nutcracker") is None,
                                reason="nutcracker (twemproxy) not installed")


def cluster(*args, env):
    subprocess.run(["bash", str(SCRIPT), *map(str, args)], check=True, env=env, timeout=120)


def test_100k_keys_through_twemproxy_survive_a_kill_9(tmp_path):
    env = dict(os.environ, SCREE_BIN=scree_bin())
    # Ports: the proxy on base, shards on base+1..3, nutcracker's stats on base+1000.
    base = None
    for _ in range(20):
        p = free_port()
        if 1024 < p < 60000:
            base = p
            break
    d = tmp_path / "cluster"
    cluster("start", d, 3, base, env=env)
    try:
        proxy = redis.Redis(host="127.0.0.1", port=base, socket_timeout=30, protocol=2,
                            lib_name=None, lib_version=None)
        pipe = proxy.pipeline(transaction=False)
        for i in range(KEYS):
            pipe.set(f"key:{i}", f"value-{i}")
            if i % 1000 == 999:
                assert all(pipe.execute())
        assert all(pipe.execute())
        shards = [redis.Redis(host="127.0.0.1", port=base + i, protocol=2) for i in (1, 2, 3)]
        # Counted by SCAN: DBSIZE is exact only up to 100,000 keys per server.
        sizes = [sum(1 for _ in s.scan_iter(count=1000)) for s in shards]
        assert sum(sizes) == KEYS, sizes
        # ketama over three equal shards: each holds about a third.
        for n in sizes:
            assert 0.25 * KEYS <= n <= 0.42 * KEYS, sizes
        print(f"keys per shard: {sizes}")

        cluster("kill9", d, 2, env=env)
        cluster("restart", d, 2, env=env)
        # Reads through the proxy; it reconnects to the restarted shard.
        deadline = time.time() + 30
        while True:
            try:
                proxy.get("key:0")
                break
            except redis.RedisError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        missing = []
        for start in range(0, KEYS, 1000):
            names = [f"key:{i}" for i in range(start, start + 1000)]
            for attempt in range(20):
                try:
                    got = proxy.mget(names)
                    break
                except redis.RedisError:
                    time.sleep(0.2)
            else:
                raise AssertionError(f"MGET through the proxy kept failing at {start}")
            missing += [n for n, g in zip(names, got)
                        if g != f"value-{n.split(':')[1]}".encode()]
        assert not missing, f"{len(missing)} keys lost, e.g. {missing[:5]}"
        assert sum(1 for _ in shards[1].scan_iter(count=1000)) == sizes[1]
    finally:
        cluster("stop", d, env=env)
