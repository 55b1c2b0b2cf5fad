"""A server dying under a real `aitp run`, and a disk filling under it: one line, a quick exit, a home that resumes.

The Prefect and MLflow servers are real processes SIGKILLed mid-run; the full disk is a real tmpfs
(mounted in a user namespace, `unshare -rm`) filled to its last byte mid-run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from aitp.lake import committed_shards
from aitp.service_watch import WatchedService, watch_services
from aitp.services import Service
from tests.loop.helpers import AITP, REPO, champion_weights, env, lake_counts, run_aitp


def _mid_rollouts(home: Path) -> bool:
    return (home / "lake").exists() and len(committed_shards(home, "rollouts", "mini", 1)) >= 1


def _start(args: list[str], environ: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(AITP + args, env=environ, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip


def _wait_for(proc: subprocess.Popen, point, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not point():
        if proc.poll() is not None:
            raise AssertionError(f"aitp exited ({proc.returncode}) before the fault:\n{proc.communicate()}")
        assert time.monotonic() < deadline, "the fault point never came"
        time.sleep(0.05)


def _ends_like_the_clean_run(home: Path, baseline, prefect_server: str) -> None:
    home0, _, _ = baseline
    done = run_aitp(["run", "--resume", "mini", "--home", str(home), "--no-report"], env(prefect_server))
    assert done.returncode == 0, done.stdout + done.stderr
    assert lake_counts(home, "mini") == lake_counts(home0, "mini")
    assert champion_weights(home, "mini") == champion_weights(home0, "mini")


def test_a_dead_process_is_reported_within_seconds(tmp_path):
    """The watcher alone, on a real process SIGKILLed: it names that one, once, within about a second."""
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    doomed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    services = [WatchedService(Service(name, "http://127.0.0.1:1", p.pid), recorded=False)
                for name, p in (("prefect", alive), ("mlflow", doomed))]  # fmt: skip
    deaths: list[tuple[str, float]] = []
    try:
        with watch_services(services, lambda w: deaths.append((w.service.name, time.monotonic())), every_s=0.2):
            time.sleep(0.5)
            assert deaths == []
            doomed.kill()  # left unreaped: a zombie is dead too
            killed = time.monotonic()
            time.sleep(1.0)
    finally:
        alive.kill()
        doomed.kill()
        alive.wait()
        doomed.wait()
    assert [name for name, _ in deaths] == ["mlflow"]
    assert deaths[0][1] - killed < 0.6
    message = str(services[1].died(tmp_path, "aitp run --resume mini --home H"))
    assert "MLflow server" in message and "aitp run --resume mini --home H" in message


@pytest.mark.slow  # a whole run killed and resumed (> 30 s): run on purpose with -m slow
def test_prefect_server_killed_mid_run(baseline, prefect_server, tmp_path):
    """SIGKILL of the Prefect server the run started itself, during iteration 1's rollouts."""
    home0, config, _ = baseline
    home = tmp_path / "home"
    environ = {k: v for k, v in env().items() if k != "PREFECT_API_URL"}  # the run starts its own server
    proc = _start(["run", "--config", str(config), "--home", str(home), "--no-report"], environ)
    try:
        _wait_for(proc, lambda: _mid_rollouts(home))
        server = next(c for c in psutil.Process(proc.pid).children() if "server" in c.cmdline())
        server.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    assert len(err.strip().splitlines()) == 1, err
    assert "Prefect server this run started" in err and f"pid {server.pid}" in err
    assert "aitp run --resume mini --home" in err
    assert took < 10, took
    _ends_like_the_clean_run(home, baseline, prefect_server)


FULL_DISK = """
import json, os, subprocess, sys, time
from pathlib import Path

from aitp.disk import free_bytes
from aitp.lake import committed_shards
from tests.loop.helpers import AITP, champion_weights, lake_counts

disk, config = Path(sys.argv[1]), sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], check=True)
home = disk / "home"
run = subprocess.Popen(AITP + ["run", "--config", config, "--home", str(home), "--no-report"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
deadline = time.monotonic() + 600
while not ((home / "lake").exists() and committed_shards(home, "rollouts", "mini", 1)):
    assert run.poll() is None and time.monotonic() < deadline, run.communicate()
    time.sleep(0.05)
filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
for chunk in (2**20, 4096):  # every byte left, whatever the run writes meanwhile
    try:
        while True:
            os.write(filler, bytes(chunk))
    except OSError:
        pass
os.close(filler)
filled, left = time.monotonic(), free_bytes(disk)
err = run.communicate(timeout=600)[1]
out = {"rc": run.returncode, "stderr": err, "took": time.monotonic() - filled, "left": left}
os.unlink(disk / "filler")
again = subprocess.run(AITP + ["run", "--resume", "mini", "--home", str(home), "--no-report"],
                       capture_output=True, text=True)
out["resumed"] = {"rc": again.returncode, "output": again.stdout + again.stderr}
if again.returncode == 0:
    out["resumed"].update(counts=lake_counts(home, "mini"), champion=champion_weights(home, "mini"))
print(json.dumps(out))
"""


def _can_mount_tmpfs(where: Path) -> bool:
    where.mkdir()
    probe = subprocess.run(["unshare", "-rm", "mount", "-t", "tmpfs", "tmpfs", str(where)], capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow  # a whole run killed and resumed (> 30 s): run on purpose with -m slow
def test_disk_fills_mid_run(baseline, prefect_server, tmp_path):
    """A real tmpfs home, filled to its last byte (fallocate) during iteration 1's rollouts, in a user namespace."""
    if shutil.which("unshare") is None or not _can_mount_tmpfs(tmp_path / "disk"):
        pytest.skip("this machine does not let an unprivileged user mount a tmpfs (unshare -rm)")
    home0, config, _ = baseline
    done = subprocess.run(["unshare", "-rm", sys.executable, "-c", FULL_DISK, str(tmp_path / "disk"), str(config)],
                          env=env(prefect_server), cwd=REPO, capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["left"] < 4096  # the disk really was full
    assert out["rc"] != 0
    assert len(out["stderr"].strip().splitlines()) == 1, out["stderr"]
    assert "no space left on the device holding" in out["stderr"] and "free there" in out["stderr"]
    assert "aitp run --resume mini --home" in out["stderr"]
    assert out["took"] < 120, out["took"]
    resumed = out["resumed"]
    assert resumed["rc"] == 0, resumed["output"]
    assert resumed["counts"] == lake_counts(home0, "mini")
    assert tuple(resumed["champion"]) == champion_weights(home0, "mini")


CRASH_AT_START = """
import sys, traceback

def open_database():
    raise OSError(28, "No space left on device")

try:
    tables = open_database() or []
except OSError:
    traceback.print_exc()  # its frames underlined with carets
    print("ERROR:    Application startup failed. Exiting.")  # as uvicorn ends a server's log
    sys.exit(3)
"""


def test_a_server_dying_at_start_is_quoted_by_its_exception(tmp_path):
    """A real server-like process dying at start: the error quotes its exception, not the log's last line."""
    from aitp.services import ServiceError, _wait_healthy

    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", CRASH_AT_START], stdout=out, stderr=subprocess.STDOUT)
    with pytest.raises(ServiceError) as raised:
        _wait_healthy("http://127.0.0.1:1/health", proc, log, timeout=30)
    assert "(OSError: [Errno 28] No space left on device)" in str(raised.value)
