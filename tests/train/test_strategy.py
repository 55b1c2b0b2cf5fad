"""Hardware -> strategy: plain on CPU, DeepSpeed ZeRO on CUDA with stage and offload from config."""

import pytest

from aitp.train.strategy import (
    Hardware,
    StrategyError,
    build_strategy,
    deepspeed_config,
    detect_hardware,
    plan_strategy,
)

CPU = Hardware("cpu", 1, "x86_64")
GPUS = Hardware("cuda", 4, "NVIDIA H100 80GB HBM3")


def test_cpu_gets_the_plain_single_device_strategy_whatever_the_zero_stage():
    plan = plan_strategy(CPU, zero_stage=3, offload="all")
    assert (plan.name, plan.accelerator, plan.devices, plan.precision) == ("single", "cpu", 1, "32-true")
    assert build_strategy(plan) == "auto" and not plan.deepspeed and not plan.needs_launch


def test_cuda_gets_deepspeed_with_stage_and_offload_from_config(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: True)
    plan = plan_strategy(GPUS, zero_stage=2, offload="optimizer", devices=1, micro_batch_size=4)
    assert (plan.name, plan.zero_stage, plan.precision, plan.devices) == ("deepspeed", 2, "bf16-mixed", 1)
    config = deepspeed_config(plan)
    assert config["zero_optimization"]["stage"] == 2
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in config["zero_optimization"]
    assert config["train_micro_batch_size_per_gpu"] == 4
    stage3 = deepspeed_config(plan_strategy(GPUS, zero_stage=3, offload="all"))
    assert stage3["zero_optimization"]["offload_param"]["device"] == "cpu"


def test_one_gpu_s_zero_2_copies_no_gradient_into_buckets_where_nothing_needs_them(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: True)

    def copies(**plan) -> bool:
        return deepspeed_config(plan_strategy(GPUS, **plan))["zero_optimization"]["contiguous_gradients"]

    assert not copies(zero_stage=2, devices=1)  # nothing to communicate
    assert copies(zero_stage=2, devices=2)  # buckets are what is reduced between GPUs
    assert copies(zero_stage=2, devices=1, offload="optimizer")  # offload moves gradients through them
    assert copies(zero_stage=3, devices=1)  # stage 3 partitions through them


def test_zero_stage_0_is_plain_ddp_and_several_gpus_need_a_launched_process(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: True)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    plan = plan_strategy(GPUS, zero_stage=0)
    assert (plan.name, plan.devices) == ("ddp", 4) and plan.needs_launch
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert not plan.needs_launch  # already one rank of a torchrun group
    assert plan_strategy(GPUS, zero_stage=0, devices=1).name == "single"


def test_impossible_plans_are_one_line_errors():
    with pytest.raises(StrategyError, match="needs ZeRO stage 3"):
        plan_strategy(GPUS, zero_stage=2, offload="all")
    with pytest.raises(StrategyError, match="lower devices"):
        plan_strategy(GPUS, devices=8)
    with pytest.raises(StrategyError, match="needs CUDA"):
        plan_strategy(CPU, devices=2)


def test_deepspeed_missing_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_deepspeed(name, *args, **kwargs):
        if name == "deepspeed":
            raise ImportError("no deepspeed")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_deepspeed)
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: True)
    with pytest.raises(StrategyError, match=r"aitp\[gpu\]"):
        build_strategy(plan_strategy(GPUS, zero_stage=2, devices=1))


def test_detect_hardware_names_the_device():
    hw = detect_hardware()
    assert hw.accelerator in ("cpu", "cuda") and hw.devices >= 1 and hw.name


def test_one_process_zero3_keeps_weights_whole_and_nothing_else_does(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: True)

    def whole(**plan) -> bool:
        planned = plan_strategy(GPUS, zero_stage=plan.pop("zero_stage", 3), **plan)
        threshold = deepspeed_config(planned)["zero_optimization"].get("stage3_param_persistence_threshold")
        assert planned.whole_weights == (threshold is not None)  # the plan and DeepSpeed's config agree
        return planned.whole_weights

    assert whole(devices=1) and whole(devices=1, offload="optimizer")
    assert not whole(devices=2)  # partitions of two are halves: ZeRO-3 gathers them
    assert not whole(devices=1, offload="all")  # the weights live in CPU memory
    assert not whole(devices=1, nodes=2)
    assert not whole(zero_stage=2, devices=1)
    assert not plan_strategy(CPU, zero_stage=3, devices=1).whole_weights


def test_compiled_zero3_keeps_weights_whole_in_one_process_and_compiles_by_block_across_several(monkeypatch):

    from aitp.train.config import TrainConfig

    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: True)
    one = plan_strategy(GPUS, zero_stage=3, devices=1, compile=True)
    assert one.whole_weights and not one.compile_blocks  # one graph of network and loss, as without ZeRO
    for several in ({"devices": 2}, {"devices": "auto"}, {"devices": 1, "nodes": 2}):
        plan = plan_strategy(GPUS, zero_stage=3, compile=True, **several)
        assert plan.compile_blocks and not plan.whole_weights, several
        assert not plan_strategy(GPUS, zero_stage=3, **several).compile_blocks  # eager: nothing to compile
    assert not plan_strategy(GPUS, zero_stage=2, devices=2, compile=True).compile_blocks  # ZeRO-2: weights whole
    assert (
        TrainConfig(compile=True, zero_stage=3, devices=2).compile and TrainConfig(compile=True, zero_stage=3).compile
    )
    assert plan_strategy(CPU, zero_stage=3, compile=True).name == "single"  # a CPU has no ZeRO


def test_compiled_zero3_refuses_offloaded_weights_and_cuda_graphs_across_processes_in_one_line(monkeypatch):
    from pydantic import ValidationError

    from aitp.train.config import TrainConfig

    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: True)
    with pytest.raises(ValidationError, match="set compile: false, or offload: none or optimizer"):
        TrainConfig(compile=True, zero_stage=3, offload="all")
    with pytest.raises(StrategyError, match="set compile false, or offload none or optimizer"):
        plan_strategy(GPUS, zero_stage=3, devices=1, offload="all", compile=True)
    for several in ({"devices": 2}, {"nodes": 2}):
        with pytest.raises(ValidationError, match="set compile: true"):
            TrainConfig(compile="reduce-overhead", zero_stage=3, **several)
    with pytest.raises(StrategyError, match="set compile true"):
        plan_strategy(GPUS, zero_stage=3, compile="reduce-overhead")  # auto: all four GPUs of this machine
    assert plan_strategy(GPUS, zero_stage=3, devices=1, compile="reduce-overhead").whole_weights  # fixed addresses


def test_nodes_plan_ddp_on_cpu_and_launch_outside_a_process_group(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    plan = plan_strategy(Hardware("cpu", 1, "cpu"), nodes=2)
    assert (plan.name, plan.devices, plan.nodes, plan.needs_launch) == ("ddp", 1, 2, True)
    assert plan.describe() == "ddp on 2 nodes x 1xcpu (32-true)"
    gpu = plan_strategy(Hardware("cuda", 1, "H200"), zero_stage=2, precision="bf16-mixed", nodes=2)
    assert (gpu.name, gpu.nodes, gpu.needs_launch) == ("deepspeed", 2, True)
    assert deepspeed_config(gpu)["zero_optimization"]["overlap_comm"]  # gradients cross machines: not one process


def test_no_zero_plan_has_deepspeed_synchronize_the_device_for_its_throughput_log():
    for stage, devices in ((2, 1), (3, 1), (3, 2)):
        config = deepspeed_config(plan_strategy(GPUS, zero_stage=stage, devices=devices))
        assert config["timers"] == {"throughput": {"enabled": False}}, (stage, devices)


def test_partitioned_zero3_prefetches_at_least_a_decoder_block_ahead(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: True)

    def prefetch(**plan) -> int | None:
        return deepspeed_config(plan_strategy(GPUS, **plan))["zero_optimization"].get("stage3_prefetch_bucket_size")

    block_1_7b = 4 * 2048 * 2048 + 3 * 2048 * 8192  # attention and MLP weights of one SmolLM2-1.7B block
    assert prefetch(zero_stage=3, devices=2) > block_1_7b
    assert prefetch(zero_stage=3, devices=1, offload="all") > block_1_7b  # partitioned too, on the CPU
    assert prefetch(zero_stage=3, devices=1) is None  # whole weights: nothing to gather
    assert prefetch(zero_stage=2, devices=2) is None


def test_zero3_gathered_by_block_keeps_no_weight_whole_across_steps(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda: True)

    def persistence(**plan) -> int | None:
        config = deepspeed_config(plan_strategy(GPUS, zero_stage=3, **plan))
        return config["zero_optimization"].get("stage3_param_persistence_threshold")

    assert persistence(devices=2, compile=True) == 0  # a block's norms come in its gather
    assert persistence(devices=2) is None  # eager: each norm module would gather its weight on its own
    assert persistence(devices=1, compile=True) > 10**12  # one process: every weight whole
