"""Rollouts: sample and score groups of completions for items, fanned out over a Dask cluster."""

from aitp.rollouts.cluster import dask_client
from aitp.rollouts.run import group_records, run_rollouts
from aitp.rollouts.shards import cut_shards, sample_seed

__all__ = ["cut_shards", "dask_client", "group_records", "run_rollouts", "sample_seed"]
