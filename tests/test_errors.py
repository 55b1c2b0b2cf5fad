"""Each error class has one definition: a raiser in one module and a catcher in another name the same class."""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path

import pytest

from aitp.errors import AitpError, CheckpointError, UnknownExperimentError

PACKAGE = Path(__file__).resolve().parents[1] / "aitp"


def _exception_classes() -> dict[str, list[str]]:
    """Class name -> the modules under aitp/ that define it, for classes named like exceptions."""
    found = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception")):
                found[node.name].append(str(path.relative_to(PACKAGE.parent)))
    return found


def test_no_error_class_is_defined_twice():
    twice = {name: paths for name, paths in _exception_classes().items() if len(paths) > 1}
    assert twice == {}


def test_the_loop_and_the_report_raise_the_same_unknown_experiment_error(tmp_path):
    from aitp.loop.experiment import UnknownExperimentError as loop_error
    from aitp.loop.experiment import recorded_config
    from aitp.report import UnknownExperimentError as report_error

    assert loop_error is report_error is UnknownExperimentError and issubclass(UnknownExperimentError, AitpError)
    with pytest.raises(UnknownExperimentError, match=r"^no experiment 'nope' under .*: known are none \(start one"):
        recorded_config(tmp_path, "nope")


def test_a_tiny_checkpoint_that_is_not_one_raises_the_shared_checkpoint_error(tmp_path):
    from aitp.policies.tiny.checkpoint import load_checkpoint

    with pytest.raises(CheckpointError, match="is not a tiny-model checkpoint"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"aitp_policy": "tiny"}))
    with pytest.raises(CheckpointError, match="has no model.safetensors: it is incomplete, save it again"):
        load_checkpoint(tmp_path)
