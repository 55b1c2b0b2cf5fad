"""Theorem proving: prover environments, theorem sets, proof trees, search, tactic policies, traces, learning.

Import the modules themselves (`aitp.proving.backends`, `aitp.proving.search`, ...): the package imports nothing,
so a command that needs one prover module does not pay for torch and the learning code.
"""
