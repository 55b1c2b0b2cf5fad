"""A run's own Prefect server lives and dies with the run, even when the run is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

SCRIPT = """
import sys, time
from pathlib import Path
from aitp.services import prefect_api

with prefect_api(Path(sys.argv[1])) as url:
    print(url, flush=True)
    time.sleep(600)
"""


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2):
            return True
    except OSError:
        return False


def test_embedded_server_dies_with_a_killed_run(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    run = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], env=environ, stdout=subprocess.PIPE, text=True
    )
    try:
        url = run.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and _answers(url)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _answers(url) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _answers(url)
