"""Rollouts: sample and score groups of completions for items, fanned out over a Dask cluster."""

from aitp.reasoning.rollouts.run import group_records, run_rollouts

__all__ = ["group_records", "run_rollouts"]
