"""The proving world's data: theorem sets, and the lake's proof tables as rows and as training data.

`theorem_set` (a set with fixed hash splits) and `theorems` (the named sets, extracted and cached);
`traces` (search results as `proof_nodes`, `proof_edges`, `proofs` rows); `trace_queries` (the SQL every
kind of training data shares: train split only), `training_data` (tactic examples, premises, preference
pairs) and `critic_data` (goal-value labels). The package imports nothing.
"""
