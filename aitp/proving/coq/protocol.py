"""A client for `coqidetop`'s XML protocol (Coq 8.16): Add, Edit_at, Goal, Query.

Only the calls proof search needs. Each call writes one `<call>` and reads until the matching
top-level `<value>`; feedback messages in between are kept for error reporting. A call that
outlives its deadline is interrupted with SIGINT (coqidetop's own interrupt); if Coq still does
not answer, the process is killed and `ProverCrashedError` raised, so the caller can restart it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from aitp.proving.coq.prefix import prover_binary, prover_env
from aitp.proving.errors import ProverCrashedError, ProverUnavailableError

COQ_INSTALL_HINT = "install Coq with `apt-get install -y coq` (or run scripts/install_provers.sh)"


def coqidetop_binary() -> str | None:
    """Path of the coqidetop executable, if installed (an offline install's prefix first)."""
    return prover_binary("coqidetop.opt", "coqidetop")


def coq_available() -> tuple[bool, str]:
    """Whether coqidetop is installed, and why not."""
    if coqidetop_binary() is None:
        return False, f"coqidetop not found; {COQ_INSTALL_HINT}"
    return True, ""


@dataclass
class CoqGoal:
    """One goal as Coq prints it."""

    hyps: list[str]
    concl: str

    def text(self) -> str:
        """Hypotheses one per line, then the conclusion after ⊢."""
        return "\n".join([*self.hyps, f"⊢ {self.concl}"])


@dataclass
class CoqGoals:
    """The focused goals plus how many goals sit in the background, shelf and given-up list."""

    foreground: list[CoqGoal] = field(default_factory=list)
    background: int = 0
    shelved: int = 0
    given_up: int = 0


class CoqError(Exception):
    """Coq answered `fail`: the message and the last good state."""

    def __init__(self, message: str, state_id: int | None) -> None:
        super().__init__(message)
        self.state_id = state_id


class CoqTimeout(Exception):
    """A call was interrupted at its deadline."""


def _flat(elem: ET.Element) -> str:
    return " ".join("".join(elem.itertext()).replace("\xa0", " ").split())


def _goal_of(elem: ET.Element) -> CoqGoal:
    children = list(elem)
    hyps = [_flat(h) for h in children[1]]
    return CoqGoal(hyps=hyps, concl=_flat(children[2]))


class CoqIdeTop:
    """One coqidetop process speaking the XML protocol over stdin/stdout."""

    def __init__(self, args: tuple[str, ...] = ()) -> None:
        binary = coqidetop_binary()
        if binary is None:
            raise ProverUnavailableError(f"Coq backend unavailable: coqidetop not found; {COQ_INSTALL_HINT}")
        cmd = [binary, "-main-channel", "stdfds", "-async-proofs", "off", *args]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=prover_env(),
        )
        self._buffer = b""
        self.messages: list[str] = []  # each message on one line
        self.texts: list[str] = []  # the same messages with Coq's line breaks kept
        init = self._call('<call val="Init"><option val="none"/></call>', deadline=60.0)
        self.init_state = int(init[0].get("val"))

    # --- transport -------------------------------------------------------------------------
    def _call(self, xml: str, deadline: float) -> ET.Element:
        if self.proc.poll() is not None:
            raise ProverCrashedError(f"coqidetop exited with status {self.proc.returncode}")
        self.messages, self.texts = [], []
        try:
            self.proc.stdin.write(xml.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ProverCrashedError(f"coqidetop pipe closed: {exc}") from exc
        value = self._read_value(time.monotonic() + deadline)
        if value is None:  # deadline passed: interrupt, then give Coq a moment to answer
            self._signal(signal.SIGINT)
            value = self._read_value(time.monotonic() + 3.0)
            if value is None:
                self.kill()
                raise ProverCrashedError("coqidetop did not answer after an interrupt")
            if value.get("val") == "fail":
                raise CoqTimeout(_flat(value))
        if value.get("val") == "fail":
            sid = value.find("state_id")
            raise CoqError(_flat(value) or "Coq error", int(sid.get("val")) if sid is not None else None)
        return value

    def _read_value(self, until: float) -> ET.Element | None:
        """Read top-level elements until a <value> arrives (returned) or `until` passes (None)."""
        fd = self.proc.stdout.fileno()
        while True:
            value = self._pop_value()
            if value is not None:
                return value
            left = until - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise ProverCrashedError("coqidetop closed its output")
                self._buffer += chunk

    def _pop_value(self) -> ET.Element | None:
        end = self._buffer.find(b"</value>")
        if end < 0:
            return None
        end += len(b"</value>")
        head, self._buffer = self._buffer[:end], self._buffer[end:]
        text = head.decode("utf-8", errors="replace").replace("&nbsp;", "&#160;")
        root = ET.fromstring(f"<r>{text}</r>")
        for fb in root.findall("feedback"):
            msg = fb.find(".//richpp")
            if msg is not None:
                self.messages.append(_flat(msg))
                self.texts.append("".join(msg.itertext()).replace("\xa0", " "))
        return root.find("value")

    def _signal(self, sig: int) -> None:
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    # --- protocol calls ---------------------------------------------------------------------
    def add(self, sentence: str, state_id: int, deadline: float = 30.0) -> int:
        """Add one sentence after `state_id`; returns the new state id (not yet executed)."""
        xml = (
            '<call val="Add"><pair><pair><pair><pair>'
            f"<string>{escape(sentence)}</string><int>0</int></pair>"
            f'<pair><state_id val="{state_id}"/><bool val="false"/></pair></pair>'
            "<int>0</int></pair><pair><int>1</int><int>0</int></pair></pair></call>"
        )
        value = self._call(xml, deadline)
        return int(value.find("pair/state_id").get("val"))

    def edit_at(self, state_id: int) -> None:
        """Move the tip back to `state_id`, discarding later sentences."""
        self._call(f'<call val="Edit_at"><state_id val="{state_id}"/></call>', deadline=30.0)

    def goals(self, deadline: float = 30.0) -> CoqGoals | None:
        """Execute up to the tip and return its goals (None outside a proof)."""
        value = self._call('<call val="Goal"><unit/></call>', deadline)
        goals = value.find("option/goals")
        if goals is None:
            return None
        lists = list(goals)
        background = sum(len(side) for pair in lists[1] for side in pair)
        return CoqGoals(
            foreground=[_goal_of(g) for g in lists[0]],
            background=background,
            shelved=len(lists[2]),
            given_up=len(lists[3]),
        )

    def query(self, text: str, state_id: int, deadline: float = 30.0, lines: bool = False) -> str:
        """Run a query command (Print, Check, ...) at `state_id` and return its printed messages.

        Each message is flattened to one line, or with `lines` kept as Coq laid it out.
        """
        xml = (
            '<call val="Query"><pair><route_id val="0"/><pair>'
            f'<string>{escape(text)}</string><state_id val="{state_id}"/></pair></pair></call>'
        )
        self._call(xml, deadline)
        return "\n".join(self.texts if lines else self.messages)

    def kill(self) -> None:
        """Stop the process group for good."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
