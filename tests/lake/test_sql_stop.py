"""`aitp sql` stops on a real Ctrl-C and at --timeout, and streams a table in bounded memory."""

from __future__ import annotations

import resource
import signal
import subprocess
import time
from pathlib import Path

from tests.rollouts.helpers import PYTHON, subprocess_env

CROSS_JOIN_COUNT = "SELECT count(*) FROM range(1000000) a, range(1000000) b"  # 10^12 rows: hours of work
CROSS_JOIN_ROWS = "SELECT a.range AS i, b.range AS j, 'row ' || a.range AS name FROM range(1000000) a, range(1000000) b"
STREAMED_ROWS = 300_000
RSS_LIMIT_KB = 500 * 1024


def _cap_address_space() -> None:
    # a regression that holds rows fails fast with MemoryError instead of taking the shared machine's memory
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


def _sql(home: Path, *args: str, stdout=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen(
        [PYTHON, "-m", "aitp", "sql", *args, "--home", str(home)],
        env=subprocess_env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_cap_address_space,
    )


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def test_ctrl_c_stops_a_running_query_within_seconds(tmp_path):
    proc = _sql(tmp_path, CROSS_JOIN_COUNT)
    try:
        time.sleep(5)  # past start-up (~2 s here): the query is running
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert took < 2.0, f"stopped {took:.1f} s after SIGINT"
    assert proc.returncode != 0 and len(err.strip().splitlines()) == 1, err
    assert "query interrupted (Ctrl-C)" in err


def test_timeout_stops_a_running_query(tmp_path):
    started = time.monotonic()
    done = subprocess.run(
        [PYTHON, "-m", "aitp", "sql", CROSS_JOIN_COUNT, "--timeout", "1", "--home", str(tmp_path)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode != 0 and done.stderr.strip().splitlines() == [
        "error: query stopped at --timeout 1 s: narrow it, or pass a larger --timeout (0: no limit)"
    ]
    assert took < 8.0, f"ended {took:.1f} s after start (start-up ~2 s, then 1 s of query)"


def test_a_table_streams_in_bounded_memory_and_stops_mid_output(tmp_path):
    """Rows arrive while the 10^12-row query runs (nothing printed until the end, before); RSS stays flat."""
    proc = _sql(tmp_path, CROSS_JOIN_ROWS, "--timeout", "0", stdout=subprocess.PIPE)
    try:
        header = proc.stdout.readline()
        assert header.split() == ["i", "j", "name"]
        proc.stdout.readline()  # the rule under the header
        for _ in range(10_000):
            proc.stdout.readline()
        early = _rss_kb(proc.pid)
        for _ in range(STREAMED_ROWS):
            proc.stdout.readline()
        late = _rss_kb(proc.pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)  # drains the rows still in flight
    finally:
        proc.kill()
    assert late < RSS_LIMIT_KB and late - early < 50 * 1024, f"RSS {early} -> {late} kB"
    assert proc.returncode != 0 and "interrupted (Ctrl-C)" in err, err
