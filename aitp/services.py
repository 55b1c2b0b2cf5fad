"""Local services for a run: a Prefect API server and an MLflow tracking server on loopback.

Nothing here imports Prefect or MLflow: the servers are their own CLIs run as child processes, so
the library stays free of both. With `PREFECT_API_URL` / `MLFLOW_TRACKING_URI` set, those are used
as they are. `aitp services up` starts both and records them in `<home>/services.json`, so later
runs reuse them instead of starting their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from aitp.errors import AitpError
from aitp.processes import pid_alive

OFFLINE_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PREFECT_UI_ENABLED": "false",
}


class ServiceError(AitpError):
    """A local service that did not start or answer."""


def apply_offline_env() -> None:
    """Turn analytics, telemetry and hub downloads off for this process and its children."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port_free(port: int, option: str) -> None:
    """A one-line error naming the option when a port on 127.0.0.1 is out of range or already taken."""
    if not 0 < port <= 65535:
        raise ServiceError(f"port {port} is outside 1-65535: pick another with {option}")
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise ServiceError(
                f"port {port} on 127.0.0.1 is already taken: pick another with {option} or stop what listens there"
            ) from None


def _bin(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def _last_error(log: Path) -> str:
    """The log's last line naming an exception (`sqlite3.OperationalError: ...`), else its last line.

    A traceback's last line is not always its message: Python 3.11 underlines the failing call with carets.
    """
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()] if log.exists() else []
    named = [line for line in lines if re.match(r"[\w.]*(Error|Exception|Exit)\b", line)]
    return (named or [line for line in lines if line] or ["no log"])[-1]


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"service exited before answering at {url} ({_last_error(log)}): see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise ServiceError(f"service did not answer at {url} within {timeout:.0f}s: see {log}")


@dataclass
class Service:
    """A started server: its URL and process id."""

    name: str
    url: str
    pid: int


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the process that started it dies (even by SIGKILL)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start_prefect(home: Path, port: int | None = None, timeout: float = 120.0, tied: bool = False) -> Service:
    """Start a Prefect API server on loopback with its SQLite database under `<home>/prefect`.

    `tied`: the server stops when this process dies, however it dies (a run's own server, Linux only).
    """
    root = home / "prefect"
    root.mkdir(parents=True, exist_ok=True)
    if port:
        check_port_free(port, "--prefect-port")
    port = port or free_port()
    env = {
        **os.environ,
        **OFFLINE_ENV,
        "PREFECT_HOME": str(root),
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{root / 'prefect.db'}",
    }
    env.pop("PREFECT_API_URL", None)
    log = root / "server.log"
    cmd = [_bin("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if tied and sys.platform == "linux" else None,
        )
    url = f"http://127.0.0.1:{port}/api"
    _wait_healthy(f"{url}/health", proc, log, timeout)
    return Service("prefect", url, proc.pid)


def start_mlflow(home: Path, port: int | None = None, timeout: float = 120.0) -> Service:
    """Start an MLflow tracking server on loopback over `<home>/mlflow.db` and `<home>/mlartifacts`."""
    from aitp.registry.tracking_store import prepare_store

    if port:
        check_port_free(port, "--mlflow-port")
    prepare_store(home / "mlflow.db")  # made aside and linked in whole: the server never builds it in place
    port = port or free_port()
    log = home / "mlflow-server.log"
    cmd = [
        _bin("mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
        "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
        "--artifacts-destination", str(home / "mlartifacts"), "--workers", "1",
    ]  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env={**os.environ, **OFFLINE_ENV}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(f"{url}/health", proc, log, timeout)
    return Service("mlflow", url, proc.pid)


def stop(service: Service) -> None:
    """Stop a service and the process group it leads."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(service.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pid_alive(service.pid):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(service.pid, signal.SIGKILL)


def _registry(home: Path) -> Path:
    return home / "services.json"


def recorded_services(home: Path) -> dict[str, Service]:
    """Services recorded by `aitp services up` that are still alive and answering."""
    path = _registry(home)
    if not path.exists():
        return {}
    found = {}
    for name, data in json.loads(path.read_text()).items():
        service = Service(**data)
        health = f"{service.url}/health"
        try:
            with urllib.request.urlopen(health, timeout=2):
                found[name] = service
        except OSError:
            continue
    return found


def services_up(home: Path, prefect_port: int | None = None, mlflow_port: int | None = None) -> dict[str, Service]:
    """Start Prefect and MLflow servers for `home` (reusing live ones) and record them."""
    services = recorded_services(home)
    if prefect_port and "prefect" not in services:
        check_port_free(prefect_port, "--prefect-port")
    if mlflow_port and "mlflow" not in services:
        check_port_free(mlflow_port, "--mlflow-port")
    if "prefect" not in services:
        services["prefect"] = start_prefect(home, prefect_port)
    if "mlflow" not in services:
        try:
            services["mlflow"] = start_mlflow(home, mlflow_port)
        except ServiceError:
            if "prefect" not in recorded_services(home):
                stop(services.pop("prefect"))
            raise
    _registry(home).write_text(json.dumps({k: asdict(v) for k, v in services.items()}, indent=2))
    return services


def services_down(home: Path) -> list[str]:
    """Stop the services recorded for `home`."""
    path = _registry(home)
    if not path.exists():
        return []
    stopped = []
    for name, data in json.loads(path.read_text()).items():
        stop(Service(**data))
        stopped.append(name)
    path.unlink()
    return stopped


@contextlib.contextmanager
def prefect_api(home: Path) -> Iterator[str]:
    """The Prefect API URL to use: `PREFECT_API_URL`, a recorded server, or one started for this block."""
    apply_offline_env()
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        yield configured
        return
    recorded = recorded_services(home).get("prefect")
    if recorded:
        os.environ["PREFECT_API_URL"] = recorded.url
        try:
            yield recorded.url
        finally:
            os.environ.pop("PREFECT_API_URL", None)
        return
    service = start_prefect(home, tied=True)
    os.environ["PREFECT_API_URL"] = service.url
    try:
        yield service.url
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        stop(service)


def mlflow_uri(home: Path) -> str:
    """The MLflow tracking URI: `MLFLOW_TRACKING_URI`, a recorded server, else SQLite under `home`."""
    configured = os.environ.get("MLFLOW_TRACKING_URI")
    if configured:
        return configured
    recorded = recorded_services(home).get("mlflow")
    if recorded:
        return recorded.url
    return f"sqlite:///{home / 'mlflow.db'}"
