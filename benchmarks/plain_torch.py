"""The training step a user would write by hand (no Lightning, no DeepSpeed): the reference `train.py` times.

`benchmarks/train.py --strategies torch` trains the same model on the same batches as the project's
trainer, with the same arithmetic, so that the ratio measures what Lightning and the strategies add:
- precision: bf16 autocast over fp32 weights, which is what Lightning's `bf16-mixed` does (the gradients and
  the optimizer's weights stay fp32);
- loss: the project's sft loss, `aitp.train.logprobs.sft_nll`, the one `PolicyModule.sft_loss` computes (on
  CUDA the fused output layer and cross-entropy; with the fused head switched off, full bf16 logits and an
  fp32 cross-entropy, which is what the model's own `labels=input_ids` loss computes). The same loss on both
  sides keeps the loss kernel out of the comparison;
- compile: `torch.compile` of the model and its loss together, in the given mode, as the module compiles them;
- optimizer: `torch.optim.AdamW` (fused on CUDA) with the module's settings (lr 1e-4, betas 0.9/0.95, no weight
  decay), gradient norm clipped to 1.0, as the benchmark's Trainer does.
Over several GPUs the loss module is wrapped in `DistributedDataParallel` and then compiled, the order
PyTorch's DDP notes give so that compile splits the graph at DDP's gradient buckets and their all-reduces
overlap backward.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from aitp.train.logprobs import sft_nll

Step = Callable[[dict[str, Tensor]], Tensor]


class SftLoss(nn.Module):
    """A model and its sft loss as one module: torch.compile sees both, and DDP's forward runs the loss."""

    def __init__(self, model: nn.Module, backend: str) -> None:
        super().__init__()
        self.model, self.backend = model, backend

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return sft_nll(self.model, self.backend, batch)


def training_step(
    model: nn.Module,
    backend: str,
    compile: bool | str = False,
    autocast: torch.dtype | None = torch.bfloat16,
    lr: float = 1e-4,
    ddp: bool = False,
) -> Step:
    """One optimizer step per call on a batch already on the model's device; returns a copy of the loss.

    `model` must already sit on its device; `compile` is False, True (torch.compile's default mode) or a mode;
    `autocast` None trains in the weights' own dtype; `ddp` wraps it in DDP (the process group already joined).
    """
    loss_module: nn.Module = SftLoss(model, backend)
    device = next(model.parameters()).device
    if ddp:
        loss_module = nn.parallel.DistributedDataParallel(
            loss_module, device_ids=[device.index] if device.type == "cuda" else None
        )
    if compile:
        loss_module = torch.compile(loss_module, mode=compile if isinstance(compile, str) else None)
    params = [p for p in model.parameters() if p.requires_grad]
    fused = all(p.is_cuda for p in params)
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0, fused=fused)

    def step(batch: dict[str, Tensor]) -> Tensor:
        if compile == "reduce-overhead":  # a new step: the graphs' outputs of the last one may be reused
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            loss = loss_module(batch)
        value = loss.detach().clone()  # under CUDA graphs the next step overwrites the graph's output
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value

    return step


def timed_steps(
    step: Step, batches: Sequence[dict[str, Tensor]], warmup: int, device: torch.device
) -> tuple[float, list[Tensor]]:
    """(seconds, losses) of one step per batch; the clock runs from the start of step `warmup` to the end.

    Each batch moves to `device` inside its step, as Lightning moves it, so both sides time the copy.
    """
    if not 0 <= warmup < len(batches):
        raise ValueError(f"warmup={warmup} leaves no timed step of {len(batches)}: lower --warmup")
    losses, start = [], 0.0
    for index, batch in enumerate(batches):
        if index == warmup:
            _synchronize(device)
            start = time.perf_counter()
        losses.append(step({k: v.to(device) for k, v in batch.items()}))
    _synchronize(device)
    return time.perf_counter() - start, losses


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
