"""Fan-out over Dask: the local or existing cluster a loop acts on, and work cut into shards for its workers."""

from aitp.fanout.cluster import dask_client
from aitp.fanout.shards import cut_shards, sample_seed

__all__ = ["cut_shards", "dask_client", "sample_seed"]
