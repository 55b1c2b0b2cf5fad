"""Run by `test_zero_processes.py` in each of two processes (torch.distributed.run, gloo, on the CPU): process 0
receives SIGTERM during step 2; with the check read one step late, both processes stop at the start of step 4,
where Lightning's own check would stop them at step 3."""

from __future__ import annotations

import sys
import types

import torch
import torch.distributed as dist
from lightning.pytorch.utilities.exceptions import SIGTERMException

from aitp.train.sigterm import SigtermOneStepLate


def main() -> None:
    dist.init_process_group("gloo")
    trainer = types.SimpleNamespace(
        received_sigterm=False, strategy=types.SimpleNamespace(root_device=torch.device("cpu"))
    )
    check = SigtermOneStepLate(trainer)
    stopped_at = None
    for step in range(1, 7):
        try:
            check()  # as Lightning's loop calls it at the start of each step
        except SIGTERMException:
            stopped_at = step
            break
        if step == 2 and dist.get_rank() == 0:
            trainer.received_sigterm = True  # Lightning's signal handler sets this on the process that got it
    sys.stdout.write(f"process {dist.get_rank()} stopped at step {stopped_at}\n")  # one write: lines stay whole
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
