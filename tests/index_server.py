"""A private package index for the slow tests: pypiserver on a free loopback port, uploads behind a password.

`running_index(root)` starts ``python -m pypiserver run`` (this interpreter's, from the test extra) serving
``root/packages`` on 127.0.0.1, with uploads (pypiserver's "update" action) authenticated against an
htpasswd file and downloads open, as docs/INSTALL.md sets a team's index up; ``--disable-fallback`` keeps
pip from being redirected to the public index for a name the private one lacks. The server is stopped when
the block ends, however it ends. The port is a free one found by binding port 0; if another process takes
it before pypiserver binds, the server exits and is started again on a fresh port (three tries).

The password is stored as ``{SHA}`` (unsalted SHA-1, one of the htpasswd formats pypiserver's passlib
reads): good enough for a test on loopback, not for a team's index (docs/INSTALL.md uses ``htpasswd -B``).
"""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

USERNAME = "ci"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 10
TRIES = 3


@dataclasses.dataclass(frozen=True)
class IndexServer:
    url: str  # where twine uploads: the server's root
    simple: str  # what pip reads: the PEP 503 simple index
    packages: Path  # the folder the server stores uploads in
    username: str
    password: str
    process: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""


def loopback_env(base: dict[str, str]) -> dict[str, str]:
    """*base* with loopback kept off any proxy (requests and pip honour NO_PROXY)."""
    env = dict(base)
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    return env


def fetch(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET *url* without any proxy: (status, body); an HTTP error is a status, not an exception."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _htpasswd_line(username: str, password: str) -> str:
    digest = base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()
    return f"{username}:{{SHA}}{digest}\n"


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


def _healthy(process: subprocess.Popen, url: str) -> bool:
    """True once *url* answers 200; False if the server exits first (its port was taken)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            if fetch(url, timeout=2.0)[0] == 200:
                return True
        except OSError:  # not listening yet
            pass
        time.sleep(0.2)
    raise TimeoutError(f"pypiserver did not answer {url} within {START_TIMEOUT_S} s")


@contextlib.contextmanager
def running_index(root: Path, env: dict[str, str] | None = None) -> Iterator[IndexServer]:
    """pypiserver serving ``root/packages`` on a free loopback port, stopped when the block ends."""
    packages = root / "packages"
    packages.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(16)
    htpasswd = root / "htpasswd"
    htpasswd.write_text(_htpasswd_line(USERNAME, password), encoding="utf-8")
    env = loopback_env(dict(os.environ) if env is None else env)
    for attempt in range(TRIES):
        port = _free_port()
        log = root / f"pypiserver-{attempt}.log"
        command = [sys.executable, "-m", "pypiserver", "run", "--host", "127.0.0.1", "--port", str(port),
                   "--passwords", str(htpasswd), "--authenticate", "update", "--disable-fallback",
                   "--hash-algo", "sha256", "--health-endpoint", "/health", str(packages)]
        with open(log, "wb") as stream:
            process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=env)
        try:
            if _healthy(process, f"http://127.0.0.1:{port}/health"):
                break
        except BaseException:
            _stop(process)
            raise
        _stop(process)
    else:
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"pypiserver did not start in {TRIES} tries; its log ends:\n{tail}")
    base = f"http://127.0.0.1:{port}"
    try:
        yield IndexServer(url=f"{base}/", simple=f"{base}/simple/", packages=packages, username=USERNAME,
                          password=password, process=process, log=log)
    finally:
        _stop(process)
