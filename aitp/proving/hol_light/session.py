"""The loaded HOL Light toplevel and its forked sessions (the process side of the HOL Light backend).

`HolLightServer` starts HOL Light once (loading its library is the slow part), loads the OCaml server of
`server` into it, and serves forked sessions over a Unix socket; the server exits when its
owner goes away (its stdin closes). `HolLightSession` is one forked child, spoken to with
length-prefixed frames; a session that does not answer in time is killed.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from aitp.proving.errors import ProverCrashedError, ProverUnavailableError
from aitp.proving.hol_light.server import server_script

HOL_DIR = Path(os.environ.get("HOLLIGHT_DIR", "/usr/share/hol-light"))
HOL_INSTALL_HINT = (
    "install HOL Light with `apt-get install -y hol-light libnum-ocaml-dev` (or run scripts/install_provers.sh)"
)


def hol_light_available() -> tuple[bool, str]:
    """Whether HOL Light's toplevel and sources are installed, and why not."""
    if not (HOL_DIR / "hol.ml").is_file() or not (HOL_DIR / "ocaml").exists():
        return False, f"HOL Light not found under {HOL_DIR}; {HOL_INSTALL_HINT}"
    return True, ""


class HolLightSession:
    """One forked child of the server, spoken to over a socket with length-prefixed frames."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self._buf = b""
        self.pid = int(self._read(30.0)[1])

    def _read(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            head, sep, rest = self._buf.partition(b"\n")
            if sep and len(rest) >= int(head):
                n = int(head)
                payload, self._buf = rest[:n], rest[n:]
                return payload.decode("utf-8", errors="replace").split("\n")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ProverCrashedError("HOL Light session closed the connection")
            self._buf += chunk

    def request(self, sexp: str, timeout: float) -> list[str]:
        """Send one request; a session that does not answer in time is killed (ProverCrashedError)."""
        data = sexp.encode()
        try:
            self.sock.sendall(str(len(data)).encode() + b"\n" + data)
            return self._read(timeout)
        except TimeoutError:
            self.kill()
            raise ProverCrashedError(
                f"HOL Light session did not answer within {timeout:.0f} s", timed_out=True
            ) from None
        except OSError as exc:
            raise ProverCrashedError(f"HOL Light session failed: {exc}") from exc

    def kill(self) -> None:
        """Kill the child and close the connection."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.sock.close()


class HolLightServer:
    """The loaded HOL Light toplevel, serving forked sessions on a Unix socket."""

    _shared: HolLightServer | None = None

    def __init__(self, socket_path: str | None = None, load_timeout: float = 900.0) -> None:
        self.proc: subprocess.Popen | None = None
        self.tmp: str | None = None
        if socket_path is not None:  # an already running server
            self.path = socket_path
            return
        ok, why = hol_light_available()
        if not ok:
            raise ProverUnavailableError(f"HOL Light backend unavailable: {why}")
        self.tmp = tempfile.mkdtemp(prefix="aitp-hol-")
        self.path = os.path.join(self.tmp, "hol.sock")
        self.log = os.path.join(self.tmp, "toplevel.log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(HOL_DIR / "ocaml"), "-init", str(HOL_DIR / "hol.ml")],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.tmp,
                start_new_session=True,
            )
        script = server_script(self.tmp, self.path)
        self.proc.stdin.write(script.encode())
        self.proc.stdin.flush()
        self._wait_ready(load_timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None or b"Unbound value aitp_serve" in Path(self.log).read_bytes()[-2000:]:
                break
            if os.path.exists(self.path):
                try:
                    HolLightSession(self.path).kill()
                    return
                except OSError:
                    pass
            time.sleep(0.5)
        tail = Path(self.log).read_text(errors="replace")[-600:]
        self.close()
        raise ProverUnavailableError(f"HOL Light did not start: {' '.join(tail.split())[-300:]}")

    @classmethod
    def shared(cls) -> HolLightServer:
        """The process-wide server ($AITP_HOL_LIGHT_SOCKET reuses a running one), started on first use."""
        if cls._shared is None:
            cls._shared = cls(os.environ.get("AITP_HOL_LIGHT_SOCKET") or None)
            atexit.register(cls._shared.close)
        return cls._shared

    def connect(self) -> HolLightSession:
        """A fresh session forked from the loaded state."""
        return HolLightSession(self.path)

    def close(self) -> None:
        """Stop the toplevel (and with it every session) and remove its files."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        if HolLightServer._shared is self:
            HolLightServer._shared = None
