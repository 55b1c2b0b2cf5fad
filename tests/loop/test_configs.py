"""Every shipped loop config validates, names its own command first, and describes a consistent experiment."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitp.configs import load_config
from aitp.envs.tasks import task_info
from aitp.loop import LoopConfig

CONFIGS = sorted(p for p in (Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_validates_and_starts_with_its_command(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# ") and "aitp run" in first
    if path.name != "quickstart.yaml":
        assert f"--config configs/{path.name}" in first
    config = load_config(LoopConfig, path)
    if config.environment == "proving":  # theorems, not tasks: tests/loop/test_proving.py
        assert not config.tasks and config.proving is not None
        return
    for task in config.tasks:
        task_info(task.name)  # a real reasoning-gym task
    assert config.eval_config().tasks == [t.name for t in config.tasks]


def test_control_differs_from_quickstart_only_in_what_it_trains_on():
    root = CONFIGS[0].parent
    quick = load_config(LoopConfig, root / "quickstart.yaml").model_dump()
    control = load_config(LoopConfig, root / "quickstart-control.yaml").model_dump()
    assert control["self_train"].pop("demonstrations_only") and not quick["self_train"].pop("demonstrations_only")
    control["self_train"].pop("demonstrations"), quick["self_train"].pop("demonstrations")
    for key in ("experiment", "mode"):
        quick.pop(key), control.pop(key)
    assert quick == control


def test_gpu_prover_control_differs_only_in_learning():
    root = CONFIGS[0].parent
    loop = load_config(LoopConfig, root / "prove-coq-gpu.yaml").model_dump()
    control = load_config(LoopConfig, root / "prove-coq-gpu-control.yaml").model_dump()
    assert loop["proving"]["generator"].pop("human_steps") and "human_steps" not in control["proving"]["generator"]
    assert control["proving"].pop("learn") is False and loop["proving"].pop("learn") is True
    assert loop.pop("experiment") == "prove-coq-gpu" and control.pop("experiment") == "prove-coq-gpu-control"
    assert loop == control
    with pytest.raises(ValueError, match="human_steps trains the generator"):
        LoopConfig.model_validate(
            {
                **loop,
                "proving": {
                    **loop["proving"],
                    "learn": False,
                    "generator": {**loop["proving"]["generator"], "human_steps": True},
                },
            }
        )
