"""Lightning's per-step SIGTERM check across processes, read one step late so that no step waits for the device.

At the start of every step of a fit of several processes, Lightning (2.6) broadcasts whether process 0 received
SIGTERM and reads the flag on the host, which waits for the device to finish all work queued before it: the
last step's optimizer. The next step's launches (its batch, under ZeRO-3 its first gathers) then start on an idle
device, every step. `SigtermOneStepLate` broadcasts the flag and copies it to page-locked host memory behind an
event; the flag it reads is the previous step's, whose event the device passed long before. A SIGTERM still
stops every process at the same step, one step later than Lightning's own check would.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor

from aitp.train.module import pl


class SigtermOneStepLate:
    """The check Lightning's training loop calls at the start of each step (module docstring)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.pending: tuple[Tensor, torch.cuda.Event | None] | None = None

    def __call__(self) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        received = 1 if getattr(self.trainer, "received_sigterm", False) else 0
        flag = torch.tensor([received], device=self.trainer.strategy.root_device)
        torch.distributed.broadcast(flag, src=0)
        host = torch.empty(1, dtype=flag.dtype, pin_memory=flag.is_cuda)
        host.copy_(flag, non_blocking=flag.is_cuda)
        event = torch.cuda.Event() if flag.is_cuda else None  # on the CPU the copy is done on return
        if event is not None:
            event.record()
        previous, self.pending = self.pending, (host, event)
        if previous is None:
            return
        if previous[1] is not None:
            previous[1].synchronize()
        if int(previous[0].item()) == 1:
            with contextlib.suppress(Exception):  # as Lightning's: a process already gone must not hang the rest
                torch.distributed.barrier()
            raise SIGTERMException()


class ReadSigtermOneStepLate(pl.Callback):
    """Installs `SigtermOneStepLate` in a fit on CUDA (the CPU, where the host waits for nothing, and a Lightning
    whose loop has no such check keep their own); `installed` says whether it did."""

    installed = False

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        if hasattr(loop, "_broadcast_sigterm_tensor") and trainer.strategy.root_device.type == "cuda":
            loop._broadcast_sigterm_tensor = SigtermOneStepLate(trainer)
            self.installed = True
