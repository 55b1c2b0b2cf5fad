"""The training module's GPU choices, checked on CPU: the fused optimizer, the compile modes it takes."""

import pytest

from aitp.train.module import PolicyModule, TrainDataError
from tests.policies.test_decoder import tiny_llama  # a 2-layer random Llama with grouped query heads


def test_the_optimizer_is_fused_on_cuda_only():
    module = PolicyModule(tiny_llama(), "hf")
    optimizer = module.configure_optimizers()["optimizer"]
    assert not optimizer.defaults.get("fused")  # CPU parameters: the per-parameter loop, as before


def test_an_unknown_compile_mode_is_refused():
    assert PolicyModule(tiny_llama(), "hf", compile="reduce-overhead").compile == "reduce-overhead"
    with pytest.raises(TrainDataError, match="unknown compile mode 'fast'"):
        PolicyModule(tiny_llama(), "hf", compile="fast")


def test_the_config_offers_the_modes_the_module_takes():
    from typing import get_args

    from aitp.train.config import TrainConfig
    from aitp.train.module import COMPILE_MODES

    offered = {a for arg in get_args(TrainConfig.model_fields["compile"].annotation) for a in get_args(arg) or [arg]}
    assert offered - {bool} == set(COMPILE_MODES)
