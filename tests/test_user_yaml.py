"""YAML from users is bounded: bombs, recursive anchors, huge and deep files are refused in one line."""

from __future__ import annotations

import subprocess

import pytest

from aitp.configs import ConfigError, load_config
from aitp.loop import LoopConfig
from aitp.policies.spec import PolicySpec
from aitp.user_yaml import MAX_YAML_BYTES, MAX_YAML_NODES, YamlLimitError, parse_yaml
from tests.rollouts.helpers import PYTHON, subprocess_env

PEAK_RSS_LIMIT = 500 * 2**20


def billion_laughs(levels: int = 9) -> str:
    """Ten values, each level ten aliases of the one below: 10**levels values once expanded."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


# Run between this process and the command, so the command's peak RSS is its own: a child exec'd
# straight from pytest inherits pytest's high-water mark in its rusage (Linux keeps the larger).
LAUNCHER = """
import os, resource, subprocess, sys
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))  # a regression fails fast, sparing the machine
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(args: list[str], cwd) -> tuple[int, str, int]:
    """Run an `aitp` command; return (exit code, stderr, its peak RSS in bytes)."""
    peak_file = cwd / "peak-rss-kb"
    done = subprocess.run(
        [PYTHON, "-c", LAUNCHER, str(peak_file), PYTHON, "-m", "aitp", *args],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stderr, int(peak_file.read_text()) * 1024


def test_a_billion_laughs_config_is_refused_in_one_line_in_bounded_memory(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("experiment: bomb\n" + billion_laughs())
    home = tmp_path / "home"
    code, err, peak = run_measured(["run", "--config", str(bomb), "--home", str(home)], tmp_path)
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert "holds more than" in err and str(bomb) in err
    assert peak < PEAK_RSS_LIMIT, f"peak RSS {peak / 2**20:.0f} MB"
    assert not home.exists() or not any(home.iterdir())  # refused before anything was written


def test_aliases_within_the_budget_still_load():
    assert parse_yaml(billion_laughs(levels=3), "small")["a3"][0][0][0][0] == "lol"  # 10**4 values
    with pytest.raises(YamlLimitError, match=f"{MAX_YAML_NODES:,}"):
        parse_yaml(billion_laughs(levels=5), "bomb")  # 10**6 values


def test_an_anchor_holding_itself_is_refused():
    with pytest.raises(YamlLimitError, match="holding itself"):
        parse_yaml("a: &a [1, *a]\n", "loop")


def test_a_set_override_is_bounded_too():
    one_line = "{" + ", ".join(billion_laughs().splitlines()) + "}"  # the same bomb in flow style
    with pytest.raises(YamlLimitError, match="--set experiment"):
        load_config(LoopConfig, None, [f"experiment={one_line}"])


def test_a_file_past_the_byte_cap_is_refused_before_it_is_read(tmp_path):
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as f:
        f.truncate(8 * 2**30)  # a sparse 8 GiB file: reading it would take the memory the cap protects
    with pytest.raises(YamlLimitError, match=f"above the {MAX_YAML_BYTES:,}-byte"):
        load_config(LoopConfig, huge)


def test_deep_nesting_and_bad_policy_specs_are_one_line_errors(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(LoopConfig, deep)
    spec = tmp_path / "spec.yaml"
    spec.write_text(billion_laughs())
    with pytest.raises(YamlLimitError, match=f"policy spec {spec}"):
        PolicySpec.parse(str(spec))
