"""Proof search algorithms over the proof hypergraph, all under the same budgets."""

from __future__ import annotations

from aitp.errors import BadInputError
from aitp.proving.search.base import (
    Budget,
    ClosingTactic,
    Critic,
    Search,
    SearchConfig,
    SearchResult,
    TacticPolicy,
    TacticSuggestion,
    constant_critic,
    length_critic,
)
from aitp.proving.search.bestfs import BestFS
from aitp.proving.search.bfs import BFS
from aitp.proving.search.fringe import Fringe
from aitp.proving.search.htps import HTPS
from aitp.proving.search.updown import UpDown

SEARCHES: dict[str, type[Search]] = {cls.name: cls for cls in (BestFS, BFS, HTPS, Fringe, UpDown)}


def make_search(name: str, config: SearchConfig | None = None, critic: Critic | None = None) -> Search:
    """Build a search algorithm by name (bestfs, bfs, htps, fringe, updown)."""
    if name not in SEARCHES:
        raise BadInputError(f"unknown search '{name}': use one of {', '.join(SEARCHES)}")
    return SEARCHES[name](config, critic)


__all__ = [
    "BFS",
    "HTPS",
    "SEARCHES",
    "BestFS",
    "Budget",
    "ClosingTactic",
    "Critic",
    "Fringe",
    "Search",
    "SearchConfig",
    "SearchResult",
    "TacticPolicy",
    "TacticSuggestion",
    "UpDown",
    "constant_critic",
    "length_critic",
    "make_search",
]
