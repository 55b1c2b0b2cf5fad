"""Every shipped loop config validates, names its own command first, and describes a consistent experiment."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitp.configs import load_config
from aitp.loop import LoopConfig
from aitp.reasoning.tasks import task_info

CONFIGS = sorted(p for p in (Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_validates_and_starts_with_its_command(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# ") and "aitp run" in first
    if path.name != "quickstart.yaml":
        assert f"--config configs/{path.name}" in first
    config = load_config(LoopConfig, path)
    world = config.environment
    if world.type == "proving":  # theorems, not tasks: tests/loop/test_proving.py
        return
    for task in world.tasks:
        task_info(task.name)  # a real reasoning-gym task
    assert world.eval_config(config.seed).tasks == [t.name for t in world.tasks]


def test_control_differs_from_quickstart_only_in_what_it_trains_on():
    root = CONFIGS[0].parent
    quick = load_config(LoopConfig, root / "quickstart.yaml").model_dump()
    control = load_config(LoopConfig, root / "quickstart-control.yaml").model_dump()
    q, c = quick["environment"]["self_train"], control["environment"]["self_train"]
    assert c.pop("demonstrations_only") and not q.pop("demonstrations_only")
    c.pop("demonstrations"), q.pop("demonstrations")
    for key in ("experiment", "mode"):
        quick.pop(key), control.pop(key)
    assert quick == control


def test_gpu_prover_control_differs_only_in_learning():
    root = CONFIGS[0].parent
    loop = load_config(LoopConfig, root / "prove-coq-gpu.yaml").model_dump()
    control = load_config(LoopConfig, root / "prove-coq-gpu-control.yaml").model_dump()
    mine, theirs = loop["environment"]["generator"], control["environment"]["generator"]
    assert mine.pop("human_steps") and not theirs.pop("human_steps")
    assert control["environment"].pop("learn") is False and loop["environment"].pop("learn") is True
    assert loop.pop("experiment") == "prove-coq-gpu" and control.pop("experiment") == "prove-coq-gpu-control"
    assert loop == control
    with pytest.raises(ValueError, match="human_steps trains the generator"):
        LoopConfig.model_validate(
            {
                **loop,
                "environment": {
                    **loop["environment"],
                    "learn": False,
                    "generator": {**loop["environment"]["generator"], "human_steps": True},
                },
            }
        )


FLAT_QUICKSTART = {  # configs/quickstart.yaml as written before each world had its `environment` section
    "experiment": "quickstart",
    "device": "cpu",
    "system_prompt": "Answer inside <answer></answer> tags.",
    "policy": {"backend": "tiny", "seed": 0},
    "tasks": [{"name": "spell_backward", "config": {"min_word_len": 3, "max_word_len": 4}}],
    "rollouts": {"items_per_task": 300, "threshold": 0.99, "chunk_items": 300, "workers": 2},
    "self_train": {"steps": 100},
}


def test_a_config_of_the_older_flat_layout_means_the_same_run():
    world = {k: v for k, v in FLAT_QUICKSTART.items() if k not in ("experiment", "device", "rollouts")}
    nested = {
        "experiment": "quickstart",
        "device": "cpu",
        "environment": {"type": "reasoning", **world, "rollouts": {"items_per_task": 300, "threshold": 0.99}},
        "fanout": {"chunk_items": 300, "workers": 2},
    }
    assert LoopConfig.model_validate(FLAT_QUICKSTART) == LoopConfig.model_validate(nested)
    proving = LoopConfig.model_validate(
        {"environment": "proving", "proving": {"train_slice": 7}, "rollouts": {"chunk_items": 3}}
    )
    assert proving.environment.type == "proving" and proving.environment.train_slice == 7
    assert proving.fanout.chunk_items == 3


def test_an_experiment_recorded_in_the_older_layout_continues(tmp_path):
    import json

    from aitp.loop.experiment import check_experiment, open_experiment, resume_config

    record = tmp_path / "experiments" / "quickstart" / "config.json"
    record.parent.mkdir(parents=True)
    record.write_text(
        json.dumps({"experiment": "quickstart", "versions": [{"hash": "old", "config": FLAT_QUICKSTART}]})
    )
    config = LoopConfig.model_validate(FLAT_QUICKSTART)
    check_experiment(tmp_path, config)  # the same recipe: no "exists with another config"
    assert (
        resume_config(tmp_path, "quickstart", ["environment.rollouts.threshold=0.5"]).environment.rollouts.threshold
        == 0.5
    )
    run = open_experiment(tmp_path, config)
    assert json.loads(record.read_text())["versions"][-1]["hash"] == run.config_hash  # re-recorded in today's layout


def test_two_gpu_overlap_differs_from_the_one_card_overlap_only_in_where_each_stage_runs():
    root = CONFIGS[0].parent
    one = load_config(LoopConfig, root / "gpu-overlap.yaml").model_dump()
    two = load_config(LoopConfig, root / "gpu-overlap-two.yaml").model_dump()
    assert two["fanout"].pop("gpus") == [1] and "gpus" not in one["fanout"]  # card 1 samples
    for stage in ("warm_start", "self_train"):  # card 0 trains
        assert two["environment"][stage].pop("devices") == 1 and one["environment"][stage].pop("devices") == "auto"
    assert one["environment"]["rollouts"].pop("gpu_memory_share") == 0.4  # one card shared with the training
    assert two["environment"]["rollouts"].pop("gpu_memory_share") is None  # card 1 is the decoder's alone
    assert one.pop("experiment") == "gpu-overlap" and two.pop("experiment") == "gpu-overlap-two"
    assert one == two


def test_two_node_gpu_config_is_the_gpu_recipe_with_its_self_training_on_two_nodes():
    root = CONFIGS[0].parent
    one = load_config(LoopConfig, root / "gpu.yaml").model_dump()
    nodes = load_config(LoopConfig, root / "gpu-nodes.yaml").model_dump()
    assert nodes["environment"]["self_train"].pop("nodes") == 2
    assert "nodes" not in one["environment"]["self_train"]  # one node: left out of the dump (and the hash)
    assert nodes["environment"]["warm_start"].pop("devices") == 1  # the warm start stays in the flow's process
    assert one["environment"]["warm_start"].pop("devices") == "auto"
    assert (one.pop("iterations"), nodes.pop("iterations")) == (4, 1)
    assert one.pop("experiment") == "gpu" and nodes.pop("experiment") == "gpu-nodes"
    assert one == nodes
