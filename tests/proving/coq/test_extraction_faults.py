"""A fresh home's first extraction of `coq-stdlib` with its coqidetop SIGKILLed mid-way: one line, extracted again,
the same set as a clean extraction, and nothing half-extracted cached."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil

from tests.proving.cases import require


def _kill_first_coqidetop(killed: list[int], after: float) -> None:
    """SIGKILL the first coqidetop this process started, once it has worked for `after` seconds (a real crash)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for child in psutil.Process().children(recursive=True):
            try:
                if "coqidetop" in child.name() and time.time() - child.create_time() >= after:
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(child.pid)
                    return
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)


def test_a_prover_killed_during_extraction_is_reported_and_the_set_extracted_again(coq_theorem_home, tmp_path, capsys):
    require("coq")
    from aitp.proving.data.theorems import load_theorem_set, theorem_set_cache

    clean = load_theorem_set("coq-stdlib", home=coq_theorem_home)
    killed: list[int] = []
    killer = threading.Thread(target=_kill_first_coqidetop, args=(killed, 2.0), daemon=True)
    killer.start()
    extracted = load_theorem_set("coq-stdlib", home=tmp_path)
    killer.join(timeout=5)
    assert killed, "coqidetop was never seen running: the fault was not injected"
    err = capsys.readouterr().err
    assert "warning: the prover died while extracting theorem set 'coq-stdlib'" in err and "try 2 of 3" in err
    assert len(err.strip().splitlines()) == 1
    assert [t.name for t in extracted.theorems] == [t.name for t in clean.theorems]
    assert [t.statement for t in extracted.theorems] == [t.statement for t in clean.theorems]
    cached = load_theorem_set("coq-stdlib", home=tmp_path)  # read back from the cache the retry wrote
    assert theorem_set_cache("coq-stdlib", tmp_path).is_file() and len(cached.theorems) == len(clean.theorems)
