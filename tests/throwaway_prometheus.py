"""A Prometheus of a test's own: Debian's binary, a temporary TSDB, a free local port, nothing scraped.

    with throwaway_prometheus.running(storage_dir) as prometheus:
        answer = prometheus.query('up', at=1700000000)   # Prometheus' JSON answer, errors included

The binary comes from tests/prometheus_tools (scripts/prometheus_tools.sh
unpacks it). The process is always stopped when the block ends, also when the
test fails; its log is kept next to the storage for the failure message.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG = "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n"


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> dict[str, Any]:
        """POST to the HTTP API; Prometheus' JSON answer, also for a refused query (status "error")."""
        data = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(self.url + path, data=data, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                answer: dict[str, Any] = json.load(response)
        except urllib.error.HTTPError as error:  # 400 bad_data, 422 execution: the body says why
            answer = json.loads(error.read() or b"{}")
        return answer

    def query(self, expr: str, at: float | None = None) -> dict[str, Any]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("/api/v1/query", **params)

    def query_range(self, expr: str, start: float, end: float, step: float) -> dict[str, Any]:
        return self.api("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def running(storage: Path, binary: Path, *, ready_timeout: float = 60) -> Iterator[Prometheus]:
    """Prometheus over `storage` (created when missing) until the block ends."""
    storage.mkdir(parents=True, exist_ok=True)
    config = storage.parent / f"{storage.name}.prometheus.yml"
    config.write_text(CONFIG)
    log = storage.parent / f"{storage.name}.prometheus.log"
    prometheus: Prometheus | None = None
    try:
        for attempt in range(3):
            prometheus = _start(binary, storage, config, log)
            if _wait_ready(prometheus, ready_timeout):
                break
            _stop(prometheus.process)
            # Another process may have taken the free port before Prometheus bound it: try another.
            if "address already in use" not in prometheus.log_tail() or attempt == 2:
                raise RuntimeError(f"the throwaway Prometheus did not become ready:\n{prometheus.log_tail()}")
        assert prometheus is not None
        yield prometheus
    finally:
        if prometheus is not None:
            _stop(prometheus.process)


def _start(binary: Path, storage: Path, config: Path, log: Path) -> Prometheus:
    port = free_port()
    with log.open("wb") as stream:
        process = subprocess.Popen(
            [
                str(binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={storage}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=stream,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Prometheus(url=f"http://127.0.0.1:{port}", process=process, log=log)


def _wait_ready(prometheus: Prometheus, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if prometheus.process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(prometheus.url + "/-/ready", timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
