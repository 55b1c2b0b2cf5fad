"""The LeanDojo backend (optional extra `lean`): Lean 4 sessions through LeanDojo.

`backend.py` is its record (registered in `aitp.proving.backends`); `env.py` the session (`LeanDojoEnv`).
The package imports nothing.
"""
