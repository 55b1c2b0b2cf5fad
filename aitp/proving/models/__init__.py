"""The prover's learned models and the tactic policies they make, how they train, and their checkpoint.

Tactic policies: `fixed_policy` (the fixed tactic set, premises ranked), `candidates` (a goal's filled
templates, by family), `ranked_policy` (candidates ranked by `tactic_ranker`), `generative` (a language model
writes the tactics; `tactic_generator` fine-tunes it). Beside them `premises` (the premise ranker) and
`goal_critic` (P(provable) of a goal). `prover_models` is their checkpoint; `training` refits them from the
lake; `external_training` runs a user's own training command instead. The package imports nothing (torch
loads with the module that needs it).
"""
