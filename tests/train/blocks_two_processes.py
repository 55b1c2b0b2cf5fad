"""Run by `test_zero_processes.py` in each of two processes (torch.distributed.run, gloo, on the CPU): a Llama with
an output layer of its own (untied), trained through DeepSpeed's real engine with the GPU's fused head, first as
ZeRO-2 eager, then as ZeRO-3 compiled by block as the project plans it (each block one graph gathering its weights
on entry, the fused head a graph of its own, no weight kept whole, the fused clipping norm); the losses of every
step must agree."""

from __future__ import annotations

import sys

import deepspeed
import torch
import torch._dynamo.utils as dynamo_utils
import torch.distributed as dist
from deepspeed.utils import set_z3_leaf_modules
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

from aitp.train.logprobs import linear_nll, sft_nll
from aitp.train.module import PolicyModule, repeated_blocks
from aitp.train.strategy import Hardware, deepspeed_config, plan_strategy
from aitp.train.zero import take_partitioned_shortcuts
from tests.policies.test_decoder import tiny_llama

STEPS = 4
TWO_GPUS = Hardware("cuda", 2, "H200")  # the plan of two GPUs; the engine runs on the CPU


class FusedHeadPolicy(PolicyModule):
    """The training module with the GPU's fused head on the CPU, called as the engine's forward."""

    def sft_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return sft_nll(self.model, self.backend, batch, fast=True, head=self._head)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._loss(batch)


def losses(stage: int) -> tuple[list[float], bool, dict, int]:
    """Each step's loss, whether the fused norm was taken, dynamo's graph counters (and whether the head has a graph)
    and the number of blocks."""
    compiled = stage == 3
    plan = plan_strategy(
        TWO_GPUS, zero_stage=stage, devices=2, precision="32-true", micro_batch_size=2, compile=compiled
    )
    assert plan.compile_blocks == compiled
    module = FusedHeadPolicy(tiny_llama(), "hf", compile=compiled, compile_blocks=plan.compile_blocks)
    assert not module.model.config.tie_word_embeddings  # the head's weight is gathered on its own
    if compiled:  # as ZeroStrategy does before DeepSpeed sets its hooks
        set_z3_leaf_modules(module, [type(repeated_blocks(module)[0])])
    config = deepspeed_config(plan) | {"gradient_clipping": 0.1}
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)
    taken = take_partitioned_shortcuts(engine.optimizer)
    torch._dynamo.reset()
    dynamo_utils.counters.clear()
    torch.manual_seed(10 + dist.get_rank())  # each process its own batches
    out = []
    for _ in range(STEPS):
        ids = torch.randint(3, 200, (2, 12))
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "target_mask": torch.ones_like(ids)}
        loss = engine(batch)
        engine.backward(loss)
        engine.step()
        out.append(float(loss))
    counters = {
        "graphs": dynamo_utils.counters["stats"].get("unique_graphs"),
        "head compiled": bool(_debug_get_cache_entry_list(linear_nll.__code__)),
        **dynamo_utils.counters["graph_break"],
    }
    blocks = len(repeated_blocks(module))
    engine.destroy()
    return out, taken, counters, blocks


def main() -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    zero2, *_ = losses(2)
    zero3, taken, counters, blocks = losses(3)
    assert taken, "ZeRO-3 over two processes did not take the fused clipping norm"
    # No graph break, the head a graph of its own; the blocks share one graph on torch 2.13 and take one each on
    # 2.11 (as the 1.7B architecture's 24 blocks do on the GPUs): from 2 to blocks + 1 graphs.
    graphs, head = counters.pop("graphs"), counters.pop("head compiled")
    assert head and not counters and 2 <= graphs <= blocks + 1, (graphs, head, counters)
    assert all(abs(a - b) <= 1e-4 * abs(a) for a, b in zip(zero2, zero3)), (zero2, zero3)
    sys.stdout.write(f"process {dist.get_rank()}: ZeRO-3 by block took ZeRO-2's steps {zero3}\n")


if __name__ == "__main__":
    main()
