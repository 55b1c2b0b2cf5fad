"""`aitp viz proof`: the page's data from lake traces, its one-line errors, and the page in headless Chromium."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aitp.proving.data.traces import trace_rows, write_traces
from aitp.proving.env import Theorem
from aitp.proving.search import Budget, SearchConfig, make_search
from aitp.viz.proof import ProofTrace, load_trace, page_data, render_html
from tests.proving.test_cli import run_cli
from tests.proving.toy import ToyEnv, ToyPolicy

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture
def toy_lake(tmp_path):
    """A lake with one HTPS and one BestFS search of the toy theorem `toy6`."""
    for algorithm in ("htps", "bestfs"):
        result = make_search(algorithm, SearchConfig(budget=Budget(expansions=30))).run(
            ToyEnv(), Theorem("toy6", "6", "toy"), ToyPolicy()
        )
        write_traces(tmp_path, "exp", 0, trace_rows(result, "toy", "exp", 0), shard=f"toy-{algorithm}")
    return tmp_path


def _search_id(home: Path, algorithm: str) -> str:
    from aitp.lake import read_partition

    rows = read_partition(home, "proof_nodes", "exp").to_pylist()
    return next(r["search_id"] for r in rows if r["search"] == algorithm)


def test_page_data_lays_out_goals_by_depth_and_replays_in_order(toy_lake):
    trace = load_trace(toy_lake, "exp", "toy6", _search_id(toy_lake, "htps"))
    data = page_data(trace)
    nodes = {n["id"]: n for n in data["nodes"]}
    assert len(nodes) == len(trace.nodes) and len(data["edges"]) == len(trace.edges)
    assert len({(n["x"], n["y"]) for n in nodes.values()}) == len(nodes)  # no two goals on one spot
    root = next(n for n in nodes.values() if n["is_root"])
    assert root["y"] == min(n["y"] for n in nodes.values()) and root["expanded_at"] == 0
    for row in trace.nodes:
        if row["parent_node_id"]:
            assert nodes[row["node_id"]]["y"] > nodes[row["parent_node_id"]]["y"]
            assert nodes[row["node_id"]]["created_at"] < data["steps"]
    # The root is proved once its proof's last tactic ran, and every goal of the proof no later.
    assert data["proved"] and 0 <= root["proved_at"] < data["steps"]
    in_proof = [n for n in nodes.values() if n["in_proof"]]
    assert in_proof and all(n["proved_at"] is not None and n["proved_at"] <= root["proved_at"] for n in in_proof)


def test_goal_text_cannot_break_out_of_the_page():
    node = {
        "node_id": "s:n0", "parent_node_id": None, "depth": 0, "goal": "</script><script>alert(1)</script>",
        "status": "open", "visits": 0, "critic_value": None, "cumulative_logprob": 0.0, "expanded_at_step": None,
        "is_root": True, "in_proof": False, "search": "bfs", "backend": "toy", "iteration": 0,
    }  # fmt: skip
    page = render_html(ProofTrace("exp", "toy:t", "s", [node], [], None))
    assert page.count("</script>") == 2  # the data tag's and the program's, nothing from the goal
    data = page.split('id="trace-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data)["nodes"][0]["goal"] == node["goal"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--experiment", "exq", "--theorem", "toy6"], "no proof traces for experiment 'exq': did you mean exp?"),
        (["--experiment", "exp", "--theorem", "toy7"], "did you mean toy:toy6?"),
        (["--experiment", "exp", "--theorem", "toy6"], "has several searches: pass --search-id"),
        (["--experiment", "exp", "--theorem", "toy6", "--search-id", "nope"], "no search 'nope'"),
    ],
)
def test_bad_input_is_a_one_line_error(monkeypatch, capsys, toy_lake, args, needle):
    out = toy_lake / "page.html"
    code, _, err = run_cli(monkeypatch, capsys, "viz", "proof", "--home", str(toy_lake), "--out", str(out), *args)
    assert code != 0 and needle in err and err.count("\n") == 1, err
    assert "aitp prove" in err or "search" in err
    assert not out.exists()


def _browser(tmp_path: Path):
    """Headless Chromium through selenium, with the flags a machine without network needs."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed: pip install 'aitp[dev]'")
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("chromium not installed: apt-get install -y chromium chromium-driver (scripts/install_provers.sh)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    for flag in [*flags, f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,900"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def test_page_replays_a_real_coq_search_in_chromium(monkeypatch, capsys, tmp_path):
    if shutil.which("coqidetop") is None and shutil.which("coqidetop.opt") is None:
        pytest.skip("coq not installed: apt-get install -y coq")
    from aitp.lake import read_partition
    from aitp.proving.coq.env import CoqEnv
    from aitp.proving.models.fixed_policy import FixedTacticPolicy

    # Not app_nil_r: with no premise map `intuition` closes it through a later List lemma, which the check refuses.
    theorem = Theorem("Coq.Bool.Bool.negb_involutive", "", "coq", module="Coq.Bool.Bool")
    with CoqEnv(tactic_timeout=3.0) as env:
        result = make_search("bestfs", SearchConfig(budget=Budget(expansions=16))).run(
            env, theorem, FixedTacticPolicy("coq")
        )
    assert result.proved, result.stop_reason
    write_traces(tmp_path, "viz", 0, trace_rows(result, "coq", "viz", 0), shard="coq-bestfs")
    rows = read_partition(tmp_path, "proof_nodes", "viz").to_pylist()
    page = tmp_path / "page.html"
    code, out, err = run_cli(
        monkeypatch, capsys, "viz", "proof", "--experiment", "viz", "--theorem", "negb_involutive",
        "--home", str(tmp_path), "--out", str(page),
    )  # fmt: skip
    assert code == 0, err
    assert f"{len(rows)} goals" in out

    from selenium.webdriver.common.by import By

    browser = _browser(tmp_path)
    try:
        browser.get(page.as_uri())
        assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-rendered") == "1"
        assert browser.find_element(By.ID, "title").text == "coq:Coq.Bool.Bool.negb_involutive"
        assert int(browser.find_element(By.ID, "node-count").text) == len(rows)
        assert len(browser.find_elements(By.CSS_SELECTOR, "g.node")) == len(rows)
        steps = browser.find_element(By.ID, "step-label").text
        assert steps == f"step {result.expansions} / {result.expansions}"
        child = next(r for r in rows if not r["is_root"])
        browser.find_element(By.CSS_SELECTOR, f'g.node[data-node-id="{child["node_id"]}"]').click()
        shown = browser.find_element(By.ID, "goal").text
        assert " ".join(shown.split()) == " ".join(child["goal"].split())
        browser.find_element(By.ID, "first").click()  # replay from the start: only the root is there
        assert browser.find_element(By.ID, "node-count").text == "1"
        browser.find_element(By.ID, "next").click()
        assert int(browser.find_element(By.ID, "node-count").text) > 1
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        browser.quit()
