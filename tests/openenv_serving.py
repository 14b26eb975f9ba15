"""A real ``ecpo serve`` process for the tests (``served``), stopped with SIGTERM and checked to exit cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
NO_PROXY = {"http": None, "https": None}


class Server:
    def __init__(self, process: subprocess.Popen, url: str) -> None:
        self.process, self.url = process, url
        self.ws_url = url.replace("http://", "ws://") + "/ws"

    def get(self, path: str, **kwargs) -> requests.Response:
        return requests.request(kwargs.pop("method", "GET"), self.url + path, proxies=NO_PROXY, timeout=30, **kwargs)

    def stop(self) -> tuple[int, str]:
        """SIGTERM; the exit status and stderr (the server must be gone within 20 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("the server did not stop within 20 s of SIGTERM") from None
        return code, self.process.stderr.read()


@contextmanager
def served(env_id: str, *options: str) -> Iterator[Server]:
    """``ecpo serve env_id --port 0 ...`` as a child process, stopped with SIGTERM at the end (exit 0, no
    traceback on stderr)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", "ecpo_train.apps.cli", "serve", env_id, "--port", "0", *options],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()  # blocks until the server printed its address (or died)
    if not line.startswith("serving"):
        process.kill()
        raise AssertionError(f"server did not start: {line!r} {process.stderr.read()[-2000:]}")
    server = Server(process, line.split(" on ", 1)[1].split()[0])
    try:
        yield server
    finally:
        code, err = server.stop()
        assert code == 0, err[-2000:]
        assert "Traceback" not in err, err[-2000:]


