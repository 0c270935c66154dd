"""Shared fixtures: a real ``redis-server`` and a real local Ray, one each per session.

* ``redis_server_factory`` — start extra servers (own port and data dir, AOF with
  ``appendfsync always``) that a test may kill and restart; all are killed at the end.
* ``redis_server`` / ``redis_url`` — one session-wide server. Tests share it, so
  each test should use its own key namespace rather than flushing the database.
* ``ray_local`` — ``ray.init(num_cpus=2, include_dashboard=False)`` once per
  session (Ray startup costs seconds), shut down at the end.
* ``tiny_ckpt`` — a tiny random Gemma 3 checkpoint, once per session: what the HTTP
  and reliability stacks serve (tests/_stack.py; the real-model tests use the embedded Gemma).

A missing ``redis-server`` binary skips the tests that need it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# The suite's exactness checks (logits against transformers' forward, batched greedy tokens against a
# request alone) are stated in float32; a CPU with bf16 dot products would otherwise default to bf16
# (serving/compute_dtype.py). Tests of the bf16 default set the variable themselves.
os.environ.setdefault("AGENTCTX_CPU_DTYPE", "float32")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: SIGKILL the server if the test process dies without running teardown."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class RedisServer:
    """A redis-server child process on 127.0.0.1 that can be killed and restarted in place."""

    def __init__(self, binary: str, data_dir: Path, port: int | None = None, fsync: str = "always") -> None:
        self.binary = binary
        self.dir = data_dir
        self.port = port or _free_port()
        self.fsync = fsync
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 15.0) -> "RedisServer":
        self.dir.mkdir(parents=True, exist_ok=True)
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--protected-mode", "yes",
                "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", self.fsync,
                "--save", "", "--daemonize", "no", "--logfile", str(self.dir / "redis.log")]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}:\n{log}")
            if self.ping():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} not ready after {timeout_s}s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop abruptly (SIGKILL by default: no shutdown save, only what AOF already has)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> "RedisServer":
        self.kill()
        return self.start()


@pytest.fixture(scope="session")
def redis_server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    binary = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
    if binary is None:
        pytest.skip("redis-server binary not installed")
    servers: list[RedisServer] = []

    def start(fsync: str = "always") -> RedisServer:
        server = RedisServer(binary, tmp_path_factory.mktemp("redis"), fsync=fsync).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()


@pytest.fixture(scope="session")
def redis_server(redis_server_factory) -> RedisServer:
    return redis_server_factory()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=2 << 30, namespace="agentctx-tests")
    yield None
    if started:
        ray.shutdown()


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.factories import make_tiny_checkpoint  # torch and transformers: only when a test needs it

    return make_tiny_checkpoint("gemma3_text", tmp_path_factory.mktemp("tiny-gemma") / "ckpt")
