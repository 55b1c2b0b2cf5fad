"""Theorem proving: the proving world the loop learns in, one package per prover backend.

- `env.py`, `errors.py`: the protocol every prover session implements (`ProverEnv`, goals, tactics, proofs) and
  the errors a user can meet;
- `backend.py`, `backends.py`: what a backend contributes (one `Backend` record) and the registry of them;
- `coq/`, `hol_light/`, `leandojo/`: the backends, each a session, its tactic grammar and its theorem extraction;
- `search/`: the proof hypergraph (`tree`), the searches over it, and searches run side by side (`concurrent`);
- `models/`: the tactic policies and the learned models behind them, their training and checkpoint;
- `data/`: theorem sets, and the lake's proof tables as trace rows and as training data;
- `config.py`, `environment.py`, `shards.py`, `evaluation.py`, `learning.py`: proving as the loop's
  environment (its settings, its Dask fan-out, its fixed evaluation, its stages as library calls);
  `retrain.py`: the built-in refit as a command for `proving.train_command`.

Import the modules themselves (`aitp.proving.backends`, `aitp.proving.search`, ...): the package imports nothing,
so a command that needs one prover module does not pay for torch and the learning code.
"""
