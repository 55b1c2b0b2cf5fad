"""What a prover backend contributes, as one frozen record: each backend package defines its own.

A backend package (`aitp/proving/coq/`, `aitp/proving/hol_light/`, `aitp/proving/leandojo/`) holds its session
(a `ProverEnv`), its tactic grammar, its theorem extraction, and a `backend.py` with its `Backend` record;
`aitp.proving.backends` registers the records in one place. Everything else in the proving world (the tactic
policies, the candidates, the theorem sets, the loop's config) asks the record, so no other module keeps a table
keyed by backend names or tests for one by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aitp.proving.data.theorem_set import TheoremSet
    from aitp.proving.env import ProverEnv

Template = tuple[str, str]
"""A tactic template and the kind of argument it takes: none, var (a variable of the goal), hyp (a hypothesis of
the goal), premise (a library fact), premises (a list of them)."""


@dataclass(frozen=True)
class TheoremSource:
    """A named theorem set a backend extracts from what its prover ships, cached under the home."""

    name: str
    """The set's name in configs and on the command line (coq-stdlib, hol-core)."""
    version: int
    """The extractor's version: a cached set older than it is extracted again."""
    extract: Callable[[], TheoremSet]
    """Extract the set from the installed prover's sources (slow: run once, then cached)."""


@dataclass(frozen=True)
class Backend:
    """One interactive prover: how to start it, what it proves, and what the tactic policies need to know of it."""

    name: str
    """The name configs, theorem sets, traces and `aitp prove --backend` use."""
    open_session: Callable[..., ProverEnv]
    """Start a session: `(tactic_timeout, address=None, **backend options)`; `address` (from `serve`) forks it from
    a loaded prover of this host where the backend serves one, and is ignored elsewhere."""
    available: Callable[[], tuple[bool, str]]
    """Whether the prover is installed here, and if not why, naming the install command."""
    install_hint: str
    """The command that installs the prover."""
    system_prompt: str
    """The generative policy's system prompt: asks for one tactic of this prover."""
    validate_tactic: Callable[[str, bool], str]
    """A model's tactic text (and whether the session loaded automation) to the normalised tactic, or
    `TacticRejectedError`: the generative policy's grammar, checked before a tactic reaches a search."""
    theorem_sets: tuple[TheoremSource, ...] = ()
    """The named theorem sets it owns, its default first (none: `aitp prove --theorems FILE.jsonl` only)."""
    loop_config: str | None = None
    """Its shipped proving-loop config, a file of `aitp.configs.SHIPPED_CONFIGS` (None: no proving loop)."""
    tactics: tuple[Template, ...] = ()
    """The fixed tactic set the ranked and fixed policies fill, in their default order (none: no fixed set)."""
    list_separator: str = ", "
    """How a `premises` argument joins its premise names."""
    hypothesis_tactics: tuple[Template, ...] = ()
    """Templates taking a hypothesis of the goal, offered after the fixed set."""
    automation_tactics: tuple[Template, ...] = ()
    """Automation a search may choose (`proving.automation_tactics`), offered last (none: not supported)."""
    goals_have_hypotheses: bool = False
    """Whether a printed goal lists named hypotheses above its conclusion, usable as tactic arguments."""
    premise_rule: str | None = None
    """The version of the rule its sessions apply to what a proof may cite, named in every evaluation's protocol
    hash, so numbers measured under two rules are never compared (None: the backend applies none of its own)."""
    serve: Callable[[], str] | None = None
    """Where this process's loaded prover forks sessions for the other processes of this host (None: the backend
    starts fast enough that every process starts its own)."""

    @property
    def default_theorem_set(self) -> str | None:
        """The theorem set a config or command searches when it names none: the first it owns."""
        return self.theorem_sets[0].name if self.theorem_sets else None
