"""`benchmarks/prove_peers.py` on real Coq: a stopped run goes on from its attempts, and a run is never mixed with
another measurement's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.proving.cases import require

REPO = Path(__file__).resolve().parents[2]


def _peers(home: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(REPO / "benchmarks" / "prove_peers.py"), "--split", "valid", "--limit", "2"]
    command += ["--provers", "coq-auto", "--workers", "1", "--home", str(home), "--out", str(out), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)


def test_a_stopped_run_resumes_from_its_attempts_and_refuses_another_measurement(coq_theorem_home, tmp_path):
    require("coq")
    out = tmp_path / "peers"
    first = _peers(coq_theorem_home, out, "--budget", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert [r["prover"] for r in rows] == ["coq-auto", "coq-auto"]

    kept, dropped = rows  # as if the run had been stopped before the second theorem's attempt was written
    (out / "attempts.jsonl").write_text(json.dumps(kept) + "\n")
    resumed = _peers(coq_theorem_home, out, "--budget", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    again = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert [r["theorem"] for r in again] == [kept["theorem"], dropped["theorem"]]
    assert again[1]["proved"] == dropped["proved"] and "| coq-auto (2 s cap) |" in resumed.stdout

    fresh = _peers(coq_theorem_home, out, "--budget", "2")
    assert fresh.returncode != 0 and "pass --resume to go on, or another --out" in fresh.stderr
    other = _peers(coq_theorem_home, out, "--budget", "3", "--resume")
    assert other.returncode != 0 and "holds a run of other theorems, budget or workers" in other.stderr
    assert (out / "attempts.jsonl").read_text().splitlines() == [json.dumps(r) for r in again]  # nothing lost


def test_a_closing_ablation_is_validated_and_named():
    """`--closing` makes a second, named variant of each model, validated as a config: a CoqHammer tactic is refused
    for an experiment that never loaded CoqHammer."""
    import importlib.util

    import pytest

    from aitp.loop.registered_prover import RegisteredProver
    from aitp.proving.config import ProvingConfig

    spec = importlib.util.spec_from_file_location("prove_peers", REPO / "benchmarks" / "prove_peers.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules["prove_peers"] = script
    spec.loader.exec_module(script)
    proving = ProvingConfig(backend="coq", automation_tactics=True, closing_tactics=[{"tactic": "sauto", "timeout": 2}])
    model = RegisteredProver("prove-coq-gpu:champion", "/ckpt", proving)
    variant = script.with_closing(model, ["sauto:2", "hammer:10:0"])
    assert variant.label == "prove-coq-gpu:champion closing sauto:2,hammer:10:0"
    assert [(c.tactic, c.timeout, c.max_depth) for c in variant.proving.closing_tactics] == [
        ("sauto", 2.0, None),
        ("hammer", 10.0, 0),
    ]
    assert variant.proving.hammer_timeout == 10.0 and model.proving.closing_tactics[0].tactic == "sauto"
    plain = RegisteredProver("prove-coq:champion", "/ckpt", ProvingConfig(backend="coq"))
    with pytest.raises(ValueError, match="hammer"):
        script.with_closing(plain, ["hammer:10:0"])
