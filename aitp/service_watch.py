"""The servers a run talks to, watched: a dead one ends the run in seconds instead of minutes.

Left alone, the Prefect client retries a vanished server for minutes and then fails with a long
`httpx.ConnectError` traceback, and a dead MLflow server fails only at the next metric. A thread
polls the processes of the servers whose process is known here (the Prefect server the run started
itself, and the servers `aitp services up` recorded for the home) about once a second and hands the
first death to the caller, which stops the run. Stopping at any moment is safe: every stage is
committed atomically, so `aitp run --resume` continues from the last committed one, as after a kill.
Servers named by `PREFECT_API_URL` or `MLFLOW_TRACKING_URI` are someone else's and are not watched.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import psutil

from aitp.errors import AitpError
from aitp.services import Service, recorded_services

SHOWN = {"prefect": "Prefect", "mlflow": "MLflow"}


class ServiceDiedError(AitpError):
    """A Prefect or MLflow server the run depends on died while it ran."""


@dataclass(frozen=True)
class WatchedService:
    """A server the run talks to, and whether `aitp services up` (rather than the run itself) started it."""

    service: Service
    recorded: bool

    def died(self, home: Path, resume: str) -> ServiceDiedError:
        """The one-line error saying which server died and how to continue."""
        s = self.service
        origin = "recorded by `aitp services up`" if self.recorded else "this run started"
        again = f" (serve it again first with `aitp services up --home {home}`)" if self.recorded else ""
        return ServiceDiedError(
            f"the {SHOWN.get(s.name, s.name)} server {origin} (pid {s.pid}, {s.url}) died, so the run stopped at its "
            f"last committed stage: continue it with `{resume}`{again}"
        )


def _own_prefect_server(url: str) -> Service | None:
    """The Prefect server this process started for `url`: its child running `prefect server start --port PORT`."""
    port = str(urlparse(url).port)
    for child in psutil.Process().children():
        try:
            args = child.cmdline()
        except psutil.Error:
            continue
        if "server" in args and "start" in args and any(a.endswith("prefect") for a in args) and port in args:
            return Service("prefect", url, child.pid)
    return None


def run_services(home: Path, prefect_url: str, mlflow_url: str) -> list[WatchedService]:
    """The servers at these URLs whose processes are known: the run's own Prefect server and the recorded ones."""
    recorded = recorded_services(home)
    found = [
        WatchedService(recorded[name], recorded=True)
        for name, url in (("prefect", prefect_url), ("mlflow", mlflow_url))
        if name in recorded and recorded[name].url == url
    ]
    own = None if any(w.service.name == "prefect" for w in found) else _own_prefect_server(prefect_url)
    return found + ([WatchedService(own, recorded=False)] if own else [])


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _dead(process: psutil.Process | None) -> bool:
    """Gone, replaced by another process under its pid, or a zombie nobody has reaped yet."""
    try:
        return process is None or not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@contextmanager
def watch_services(
    services: list[WatchedService], on_death: Callable[[WatchedService], None], every_s: float = 1.0
) -> Iterator[None]:
    """Within the block, a thread calls `on_death` (once) with the first of `services` whose process dies."""
    watched = [(w, _process(w.service.pid)) for w in services]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(every_s):
            dead = next((w for w, process in watched if _dead(process)), None)
            if dead is not None:
                on_death(dead)
                return

    thread = threading.Thread(target=watch, name="aitp-service-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def end_local_workers() -> None:
    """SIGKILL this process's multiprocessing children (local Dask workers), for a process about to end at once.

    Left to notice on their own, they outlive it by a heartbeat and log a traceback about their lost
    scheduler. The resource tracker is spared: it removes the semaphores they leave.
    """
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            args = " ".join(child.cmdline())
            if "multiprocessing" in args and "resource_tracker" not in args:
                child.kill()
