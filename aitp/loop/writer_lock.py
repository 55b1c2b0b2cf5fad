"""One writer at a time per home, and per experiment within it: every writer holds its lock while it writes.

Two runs of one experiment each judged and promoted against a registry the other was moving, so the lake's
`iterations` record and MLflow's aliases ended up disagreeing; a rollback or a lake repair in the middle of an
iteration does the same. So every writer takes a lock, whatever starts it: the loop flow (from `aitp run`, a
scheduled deployment or a manual trigger alike), `aitp promote` (`--rollback` too) and `aitp rescore` hold their
experiment's; `aitp lake check --repair` and `aitp lake vacuum`, which write across experiments, hold the whole
home's. Readers (`aitp sql`, the report, the UI) take nothing and are never blocked.

Two files: `<home>/writer.lock`, held shared by each experiment's writer and exclusively by a home-wide one, and
`experiments/<name>/writer.lock`, held exclusively. Each is an advisory `flock` (the kernel drops it when its
holder dies, however it dies, so a lock left by a killed writer is taken over without a word), and an exclusive
holder writes its name into the file for the one-line refusal: PID, host, process start time (a reused PID is not
mistaken for the holder), when it took the lock, and its command. Where a filesystem has no `flock`, the recorded
names decide whether a holder still lives.

The lock is the process's, as a POSIX lock is: a process that holds it and takes it again (`aitp run` holds it
before it starts its services, then calls the loop flow, which takes it too) joins its own hold instead of
refusing itself. A deployment's flow run is a process of its own, so it is refused like any other writer.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from aitp.errors import AitpError
from aitp.home import local_home
from aitp.lake.catalog import check_experiment
from aitp.processes import pid_alive

try:
    import fcntl
except ImportError:  # not POSIX: the recorded PID and start time decide alone
    fcntl = None

LOCK_NAME = "writer.lock"
PACKAGE = Path(__file__).resolve().parents[1]


class WriterBusyError(AitpError):
    """Another live process is writing this home, or this experiment of it."""


@dataclass(frozen=True)
class Holder:
    """The process that holds a writer lock, as it recorded itself."""

    pid: int
    started: float | None  # process start, seconds since the epoch (None where /proc cannot tell)
    command: str
    host: str | None = None  # None in a lock written before hosts were recorded: taken as this host
    since: float | None = None  # when it took the lock

    def elsewhere(self) -> bool:
        """Whether the holder runs on another machine (one that shares this home's filesystem)."""
        return self.host is not None and self.host != socket.gethostname()

    def alive(self) -> bool:
        """Whether this very process still runs (the same PID started later is another process)."""
        if self.elsewhere():
            return True  # another machine's processes cannot be looked at from here
        if not pid_alive(self.pid):
            return False
        now_started = process_start(self.pid)
        return self.started is None or now_started is None or abs(now_started - self.started) < 1.0

    def is_me(self) -> bool:
        """Whether the holder is this process (its own name in a file it is taking again)."""
        return self.pid == os.getpid() and not self.elsewhere()


@dataclass
class _Hold:
    fd: int
    shared: bool
    depth: int = 1


_held: dict[Path, _Hold] = {}  # the locks this process holds, by file
_held_guard = threading.Lock()


def _forget_holds() -> None:
    """In a forked child: another process, which joins none of its parent's holds (and whose guard is free)."""
    global _held_guard
    _held_guard = threading.Lock()
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_holds)


def process_start(pid: int) -> float | None:
    """When a process started, in seconds since the epoch, from /proc (None elsewhere or when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(int(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def home_lock_path(home: Path) -> Path:
    """Where a home's writer lock lives."""
    return Path(home) / LOCK_NAME


def lock_path(home: Path, experiment: str) -> Path:
    """Where an experiment's writer lock lives."""
    return Path(home) / "experiments" / experiment / LOCK_NAME


def read_holder(path: Path) -> Holder | None:
    """The holder a lock file names (None when it names nobody)."""
    try:
        data = json.loads(path.read_text() or "null")
        return Holder(
            int(data["pid"]), data.get("started"), str(data.get("command", "")), data.get("host"), data.get("since")
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None


@contextlib.contextmanager
def writer_lock(home: str | Path | None, experiment: str) -> Iterator[Path | None]:
    """Hold the experiment's writer lock for the block; WriterBusyError naming the holder if another has it.

    An object-store home has no file to lock: only the lake commands write one, and they take nothing there.
    """
    root = local_home(home)
    check_experiment(experiment)  # the name becomes a path: `../x` must not lock (or create) anything outside
    if root is None:
        yield None
        return
    with (
        _hold(home_lock_path(root), True, lambda: [home_lock_path(root)], root),  # no home-wide writer meanwhile
        _hold(lock_path(root, experiment), False, lambda: [lock_path(root, experiment)], root),
    ):
        yield lock_path(root, experiment)


@contextlib.contextmanager
def home_writer_lock(home: str | Path | None) -> Iterator[Path | None]:
    """Hold the whole home's writer lock for the block (no experiment is written meanwhile); WriterBusyError
    naming a holder if any writer is at work. An object-store home takes nothing, as in `writer_lock`."""
    root = local_home(home)
    if root is None:
        yield None
        return

    def holders() -> list[Path]:  # the home-wide writer, or any experiment's
        return [home_lock_path(root), *sorted((root / "experiments").glob(f"*/{LOCK_NAME}"))]

    with _hold(home_lock_path(root), False, holders, root):
        yield home_lock_path(root)


@contextlib.contextmanager
def _hold(path: Path, shared: bool, holders: Callable[[], list[Path]], home: Path) -> Iterator[None]:
    """Hold one lock file, shared or exclusive, joining this process's own hold of it; refuse if another holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = path.resolve()
    with _held_guard:  # one thread of this process takes or joins at a time
        mine = _held.get(key)
        if mine is None:
            mine = _held[key] = _take(key, shared, holders, home)
        elif shared or not mine.shared:
            mine.depth += 1
        else:  # shared to exclusive: flock converts by letting go first, so it is never asked for
            raise WriterBusyError(_refusal(_me(), key, home))
    try:
        yield
    finally:
        _release(key, mine)


def _take(key: Path, shared: bool, holders: Callable[[], list[Path]], home: Path) -> _Hold:
    """Lock the file for this process, and write this process's name into it when it holds it alone."""
    fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _lock(fd, key, shared, holders, home)
        if not shared:  # shared holders are many: each is named in its experiment's own file instead
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(asdict(_me())).encode(), 0)
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    return _Hold(fd, shared)


def _release(key: Path, hold: _Hold) -> None:
    """Let go of one hold; the last one out releases the lock (whichever thread that is)."""
    with _held_guard:
        hold.depth -= 1
        if hold.depth:
            return
        del _held[key]
    try:
        if not hold.shared:
            os.ftruncate(hold.fd, 0)  # released names nobody; only a killed holder's name stays, until taken over
    finally:
        os.close(hold.fd)  # drops the flock


def _me() -> Holder:
    pid = os.getpid()
    return Holder(pid, process_start(pid), _command(), socket.gethostname(), time.time())


def _command() -> str:
    """This process's command line as a user would type it: `aitp promote ...` rather than `.../__main__.py ...`."""
    argv = sys.argv or ["python"]
    if argv[0] in ("", "-c"):  # `python -c CODE`
        return " ".join(["python", *argv])[:300]
    program = Path(argv[0]).resolve()
    name = "aitp" if program.is_relative_to(PACKAGE) or program.name == "aitp" else program.name
    return " ".join([name, *argv[1:]])[:300]


def _lock(fd: int, key: Path, shared: bool, holders: Callable[[], list[Path]], home: Path) -> None:
    if fcntl is not None:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder, named = _live_holder(holders)
            raise WriterBusyError(_refusal(holder, named or key, home)) from None
        except OSError:
            pass  # no flock on this filesystem: fall back to the recorded holders
    for path in holders():
        holder = read_holder(path)
        if holder is not None and not holder.is_me() and holder.alive():
            raise WriterBusyError(_refusal(holder, path, home))


def _live_holder(holders: Callable[[], list[Path]], wait: float = 1.0) -> tuple[Holder | None, Path | None]:
    """The live holder some lock file names, waiting briefly for one that has just taken its lock to write its name."""
    deadline = time.monotonic() + wait
    while True:
        for path in holders():
            holder = read_holder(path)
            if holder is not None and not holder.is_me() and holder.alive():
                return holder, path
        if time.monotonic() > deadline:
            return None, None
        time.sleep(0.05)


def _refusal(holder: Holder | None, path: Path, home: Path) -> str:
    """One line: what is being written, by whom (PID, host, since when, command), and what to do."""
    if path.parent.parent.name == "experiments":
        experiment = path.parent.name
        what = f"experiment '{experiment}' in {home}"
        after = f" (a stopped run continues with `aitp run --resume {experiment}`)"
    else:  # a home-wide writer: a lake repair or vacuum, which a stopped one redoes from the start
        what, after = f"home {home}", ""
    if holder is None:
        who, stop = "another process", "stop it"
    else:
        when = holder.since or holder.started
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "an unknown time"
        host = holder.host or socket.gethostname()
        who = f"PID {holder.pid} on {host} since {since} (`{holder.command[:120]}`)"
        stop = f"stop it on {host} (or delete {path} if it is gone)" if holder.elsewhere() else f"kill {holder.pid}"
    return f"{what} is already being written by {who}: wait for it to end, or {stop} and try again{after}"
