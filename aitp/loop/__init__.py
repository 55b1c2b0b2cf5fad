"""The loop: eval -> filter -> train -> promote, one committed stage at a time (no Prefect import here)."""

from aitp.environment import ActSummary, Environment, Evaluator
from aitp.loop.config import LoopConfig
from aitp.loop.experiment import LoopRun, open_experiment, resume_config
from aitp.loop.iteration import Stages, run_iteration

__all__ = [
    "ActSummary",
    "Environment",
    "Evaluator",
    "LoopConfig",
    "LoopRun",
    "Stages",
    "open_experiment",
    "resume_config",
    "run_iteration",
]
