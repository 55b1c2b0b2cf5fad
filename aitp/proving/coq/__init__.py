"""The Coq backend: sessions over `coqidetop`, its tactic allowlist, the stdlib theorem set, human proof replay.

`backend.py` is its record (registered in `aitp.proving.backends`); `env.py` the session (`CoqEnv`) on the
XML protocol client of `protocol.py`; `tactics.py` the allowlist; `hints.py` keeps a lemma out of its own proof;
`hammer.py` is CoqHammer; `prefix.py` finds an offline install's provers; `extract.py` builds `coq-stdlib`;
`human_context.py` and `human_steps.py` replay the library's human proofs step by step. The package imports
nothing, so importing one module does not start Coq's.
"""
