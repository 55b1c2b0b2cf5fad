"""The HOL Light backend: sessions forked from one loaded toplevel, its tactic allowlist, the core theorem set.

`backend.py` is its record (registered in `aitp.proving.backends`); `env.py` the session (`HolLightEnv`);
`session.py` the loaded toplevel and its forked sessions; `server.py` the OCaml server loaded into it;
`tactics.py` the allowlist; `extract.py` builds `hol-core`. The package imports nothing.
"""
