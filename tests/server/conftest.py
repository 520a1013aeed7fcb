"""Fixtures for the `scree serve` tests with real Redis clients: start the server binary on a
free loopback port in a temporary directory, stop it with SIGTERM (or SIGKILL) at the end.

The binary is $SCREE_BIN, else target/debug/scree under $CARGO_TARGET_DIR (or ./target).
"""

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parents[2]


def scree_bin() -> str:
    if os.environ.get("SCREE_BIN"):
        return os.environ["SCREE_BIN"]
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("debug", "release"):
        p = target / profile / "scree"
        if p.exists():
            return str(p)
    raise RuntimeError(f"no scree binary under {target}; build it or set SCREE_BIN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `scree serve` process."""

    def __init__(self, db: Path, *args: str, port: int | None = None, protocol: int = 2):
        self.db = db
        self.protocol = protocol
        self.args = list(args)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log = db.parent / f"server-{self.port}.log"

    def start(self, timeout: float = 30.0) -> "Server":
        cmd = [scree_bin(), "serve", "--db", str(self.db),
               "--bind", f"127.0.0.1:{self.port}", *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "ab"))
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: "
                                   f"{self.log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start listening")

    def client(self, **kw) -> redis.Redis:
        """A redis-py client speaking the server's test protocol (redis-py 8 defaults to
        RESP3, which twemproxy does not pass)."""
        kw.setdefault("protocol", self.protocol)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        return rc


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def server(tmp_path, request):
    s = Server(tmp_path / "db", protocol=request.param).start()
    yield s
    assert s.stop() == 0, s.log.read_text()


@pytest.fixture
def make_server(tmp_path):
    started = []

    def make(*args: str, name: str = "db", port: int | None = None) -> Server:
        s = Server(tmp_path / name, *args, port=port)
        started.append(s)
        return s.start()

    yield make
    for s in started:
        s.stop(signal.SIGKILL)
