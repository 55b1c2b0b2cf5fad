"""The loop: eval -> filter -> train -> promote, one committed stage at a time (no Prefect import here)."""

from aitp.loop.config import LoopConfig, RolloutConfig, TaskSpec
from aitp.loop.experiment import open_experiment, resume_config
from aitp.loop.iteration import run_iteration, run_loop
from aitp.loop.stages import LoopRun

__all__ = [
    "LoopConfig",
    "LoopRun",
    "RolloutConfig",
    "TaskSpec",
    "open_experiment",
    "resume_config",
    "run_iteration",
    "run_loop",
]
