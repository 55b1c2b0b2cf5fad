"""The reasoning world: reasoning-gym tasks as items, sampled groups of answers as acts, the held-out set as eval.

Items and their scoring (`tasks`, `items`, `prompt`, `extraction`, `scoring`, `groups`), the rules that keep or
drop a group (`filtering`), sampling on a Dask cluster (`rollouts`), the fixed held-out evaluation
(`evaluate`), the world's part of the loop config (`config`) and its `Environment` for the loop (`environment`).
"""
