"""`aitp prove` end to end on Coq, and its one-line errors for bad input."""

from __future__ import annotations

import shutil
import sys

import pytest

from aitp.cli import main
from tests.proving.cases import require


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["aitp", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def with_cached_theorems(home, theorem_home) -> None:
    """Seed a fresh home with the session's extracted coq-stdlib set (extracting it per test costs 15-40 s)."""
    from aitp.proving.data.theorems import theorem_set_cache

    cache = theorem_set_cache("coq-stdlib", home)
    cache.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(theorem_set_cache("coq-stdlib", theorem_home), cache)


def test_prove_prints_proved_over_attempted_and_writes_traces(monkeypatch, capsys, tmp_path, coq_theorem_home):
    require("coq")
    with_cached_theorems(tmp_path, coq_theorem_home)
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "prove",
        "--backend",
        "coq",
        "--search",
        "bfs",
        "--budget-expansions",
        "8",
        "--name",
        "Coq.Arith.Compare_dec.not_le",
        "--name",
        "Coq.Bool.Bool.negb_involutive",
        "--home",
        str(tmp_path),
        "--experiment",
        "cli-test",
    )
    assert code == 0, err
    assert "proved 2/2" in out
    assert "traces:" in out
    assert any(tmp_path.rglob("*.parquet")) or any(tmp_path.rglob("*.jsonl"))


def test_prove_reaches_coqhammer_and_closing_tactics_as_the_loop_does(monkeypatch, capsys, tmp_path, coq_theorem_home):
    """`--automation` loads CoqHammer (its tactics join the set), `--closing` tries a tactic on every goal first."""
    from aitp.proving.coq.hammer import coqhammer_available

    require("coq")
    if not coqhammer_available()[0]:
        pytest.skip(f"CoqHammer unavailable: {coqhammer_available()[1]}")
    with_cached_theorems(tmp_path, coq_theorem_home)
    args = ["prove", "--home", str(tmp_path), "--name", "Coq.Bool.Bool.andb_comm", "--budget-expansions", "1"]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--automation", "--tactics", "sauto", "--no-traces")
    assert code == 0, err
    assert "proved 1/1" in out and "\tsauto" in out
    closing = [*args, "--automation", "--tactics", "intros", "--closing", "sauto:2:0", "--no-traces"]
    code, out, err = run_cli(monkeypatch, capsys, *closing)
    assert code == 0 and "proved 1/1" in out and "\tsauto." in out, err


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--closing", "sauto:2"], "--closing 'sauto:2' is refused: 'sauto' is a CoqHammer tactic"),
        (["--closing", "sauto"], "write TACTIC:SECONDS[:MAX_DEPTH]"),
        (["--name", "Coq.No.such_lemma"], "unknown theorem 'Coq.No.such_lemma'"),
        (["--search", "dfs"], "unknown search 'dfs'"),
        (["--tactics", "intros,sledgehammer"], "tactic 'sledgehammer' is not in the coq fixed tactic set"),
        (["--backend", "leandojo"], "pip install 'aitp[lean]'"),
        (["--backend", "isabelle"], "unknown backend 'isabelle'"),
        (["--theorems", "hol-core"], "pass --backend hol-light"),
    ],
)
def test_bad_input_is_a_one_line_error(monkeypatch, capsys, tmp_path, args, needle, request):
    if "--backend" not in args or "coq" in args:
        require("coq")
        with_cached_theorems(tmp_path, request.getfixturevalue("coq_theorem_home"))
    code, out, err = run_cli(monkeypatch, capsys, "prove", "--home", str(tmp_path), *args)
    assert code != 0
    assert needle in err and err.count("\n") == 1, err
    assert not any(tmp_path.rglob("*.parquet"))  # nothing half-done


def test_a_named_theorem_is_labelled_with_its_split_and_a_failure_with_its_reason(
    monkeypatch, capsys, tmp_path, coq_theorem_home
):
    from aitp.proving.data.theorems import load_theorem_set

    require("coq")
    with_cached_theorems(tmp_path, coq_theorem_home)
    valid = load_theorem_set("coq-stdlib", home=tmp_path).split("valid")[0].name
    args = ["prove", "--home", str(tmp_path), "--name", valid, "--tactics", "reflexivity", "--no-traces"]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--budget-expansions", "1")
    assert code == 0, err
    assert out.rstrip().endswith("coq-stdlib:valid"), out
    failed = next(line for line in out.splitlines() if line.startswith("failed\t"))
    assert failed.split("\t")[-1].startswith("reason: "), failed
