"""One writer per home and experiment: `aitp run` holds `experiments/<name>/writer.lock` while it runs.

Two runs of one experiment each judged and promoted against a registry the other was moving, so
the lake's `iterations` record and MLflow's aliases ended up disagreeing. The lock is an advisory
`flock` on the file (the kernel drops it when its holder dies, however it dies, so a lock left by
a killed run is taken over without a word), and the file names the holder: PID, process start
time (a reused PID is not mistaken for the holder) and command, for the one-line refusal. Where a
filesystem has no `flock`, the recorded PID and start time decide whether the holder still lives.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from aitp.errors import AitpError
from aitp.processes import pid_alive

try:
    import fcntl
except ImportError:  # not POSIX: the recorded PID and start time decide alone
    fcntl = None

LOCK_NAME = "writer.lock"


class ExperimentBusyError(AitpError):
    """Another live process is already running this experiment in this home."""


@dataclass(frozen=True)
class Holder:
    """The process that holds a writer lock, as it recorded itself."""

    pid: int
    started: float | None  # process start, seconds since the epoch (None where /proc cannot tell)
    command: str

    def alive(self) -> bool:
        """Whether this very process still runs (the same PID started later is another process)."""
        if not pid_alive(self.pid):
            return False
        now_started = process_start(self.pid)
        return self.started is None or now_started is None or abs(now_started - self.started) < 1.0


def process_start(pid: int) -> float | None:
    """When a process started, in seconds since the epoch, from /proc (None elsewhere or when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(int(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def lock_path(home: Path, experiment: str) -> Path:
    """Where an experiment's writer lock lives."""
    return Path(home) / "experiments" / experiment / LOCK_NAME


def read_holder(path: Path) -> Holder | None:
    """The holder a lock file names (None when it names nobody)."""
    try:
        data = json.loads(path.read_text() or "null")
        return Holder(int(data["pid"]), data.get("started"), str(data.get("command", "")))
    except (OSError, ValueError, TypeError, KeyError):
        return None


@contextlib.contextmanager
def writer_lock(home: Path, experiment: str) -> Iterator[Path]:
    """Hold the experiment's writer lock for the block; ExperimentBusyError naming the holder if it is taken."""
    path = lock_path(home, experiment)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _take(fd, path, home, experiment)
        me = Holder(os.getpid(), process_start(os.getpid()), " ".join(sys.argv)[:300])
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(me)).encode(), 0)
        os.fsync(fd)
        yield path
        os.ftruncate(fd, 0)  # a clean end names nobody; a killed holder's name stays until taken over
    finally:
        os.close(fd)  # drops the flock


def _take(fd: int, path: Path, home: Path, experiment: str) -> None:
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            raise ExperimentBusyError(_refusal(_live_holder(path), home, experiment)) from None
        except OSError:
            pass  # no flock on this filesystem: fall back to the recorded holder
    holder = read_holder(path)
    if holder is not None and holder.pid != os.getpid() and holder.alive():
        raise ExperimentBusyError(_refusal(holder, home, experiment))


def _live_holder(path: Path, wait: float = 1.0) -> Holder | None:
    """The holder named in the file, waiting briefly for one that has just taken the lock to write its name."""
    deadline = time.monotonic() + wait
    while True:
        holder = read_holder(path)
        if (holder is not None and holder.alive()) or time.monotonic() > deadline:
            return holder
        time.sleep(0.05)


def _refusal(holder: Holder | None, home: Path, experiment: str) -> str:
    if holder is None:
        who, stop = "another process", "stop it"
    else:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.started)) if holder.started else "unknown"
        who, stop = f"PID {holder.pid} (since {since})", f"stop it (kill {holder.pid})"
    return (
        f"experiment '{experiment}' in {home} is already being run by {who}: wait for it to end, or {stop} and "
        f"continue with `aitp run --resume {experiment}`"
    )
