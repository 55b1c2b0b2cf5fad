"""CoqHammer in the Coq backend: whether it is installed, how a session loads it, what `hammer` prints.

CoqHammer (Debian `libcoq-hammer`, 1.3.2 for Coq 8.16) brings two kinds of tactics: its own proof
search (`sauto`, `hauto`, `qauto`...; no external prover) and `hammer`, which selects premises, asks
external provers (`eprover`) for a proof and reconstructs it as one `sauto`-family tactic, printed as
"Replace the hammer tactic with: hauto use: ...". A session loads it with `session_sentences`.

Time: `hammer` runs under Coq's `Timeout T` (wall clock) like every tactic; a session is told the T it gives
`hammer` (`hammer_timeout`: its proven goals took up to 5 s on the loop's valid theorems, other tactics get 2 s).
The provers `hammer` starts are separate processes that a Coq interrupt does not stop, so their own limit
(`Set Hammer ATPLimit`) is set to half of T, and reconstruction (`Set Hammer ReconstrLimit`) to a
quarter: within T, `hammer` gets both an answer from the provers and time to replay it, and no prover
outlives the tactic by more than its own limit.

A proof records what `hammer` reconstructed (`hauto use: ...`), not `hammer`: that replays without the external
provers, and it is held to the premise rule like any tactic (`hints`: its `use:` lemmas never T or a later one).

Debian's CoqHammer 1.3.2 looks for `eprover`, `vampire`, `cvc4` and `z3_tptp`. Debian ships E as `eprover`
and CVC4's successor cvc5, which `prefix.ATP_NAMES` answers to the name `cvc4` for (translating its options and
its answer), with the `htimeout` that CoqHammer starts CVC4 under but Debian installs off PATH; Debian's z3 is built
without the TPTP front end that `z3_tptp` is, and Vampire is not packaged: here `hammer` runs E and cvc5.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from functools import cache

from aitp.proving.coq.prefix import prover_binary
from aitp.proving.errors import ProverUnavailableError

HAMMER_INSTALL_HINT = "install CoqHammer (Debian's libcoq-hammer, eprover, z3, cvc5) with scripts/install_provers.sh"
_REPLACE = re.compile(r"Replace the (?:hammer|`\w+`) tactic with:\s*(.+?)\s*$", re.S)
# Options of sauto-family tactics are `name:` followed by values; `use:` lists lemmas, comma-separated.
_OPTION = re.compile(r"\b([a-z_]+):")
# `srun TACTIC OPTIONS`: the tactic runs up to the first option (`use:`) or the end.
_SRUN = re.compile(r"^srun (?!\()(.+?)((?: [a-z_]+:.*)?)$")


@cache
def coqhammer_available() -> tuple[bool, str]:
    """Whether CoqHammer's plugin is installed for this Coq, and if not, why and how to install it."""
    from aitp.proving.coq.extract import coq_theories_dir  # where `coqc -where` points, offline prefix included

    try:
        coqlib = coq_theories_dir().parent
    except ProverUnavailableError:
        return False, f"coqc not found; {HAMMER_INSTALL_HINT}"
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"`coqc -where` failed ({exc}); {HAMMER_INSTALL_HINT}"
    if not (coqlib / "user-contrib" / "Hammer" / "Plugin" / "Hammer.vo").is_file():
        return False, f"CoqHammer is not installed for this Coq; {HAMMER_INSTALL_HINT}"
    if prover_binary("eprover") is None:
        return False, f"CoqHammer's prover eprover is not installed; {HAMMER_INSTALL_HINT}"
    return True, ""


def automation_refusal(head: str) -> str:
    """Why a CoqHammer tactic is refused in a session without it, naming the fix (one line)."""
    ok, why = coqhammer_available()
    if not ok:
        return f"'{head}' is a CoqHammer tactic and CoqHammer is unavailable: {why}"
    return (
        f"'{head}' is a CoqHammer tactic, not loaded in this session: open it with CoqEnv(automation=True) "
        "(in a loop config, proving.automation_tactics: true)"
    )


def session_sentences(hammer_timeout: float) -> tuple[str, ...]:
    """The sentences that load CoqHammer into a session whose `hammer` runs for at most `hammer_timeout` s."""
    atp = max(1, int(hammer_timeout * 0.5))
    reconstruction = max(1, int(hammer_timeout * 0.25))
    return (
        "From Hammer Require Import Hammer.",
        f"Set Hammer ATPLimit {atp}.",
        f"Set Hammer ReconstrLimit {reconstruction}.",
    )


def reconstruction(printed: Iterable[str]) -> str | None:
    """The tactic `hammer` (or `best`) said to use instead, from what the tactic printed; None if it said none.

    CoqHammer 1.3.2 prints `srun eauto use: L`, which Coq cannot parse (`eauto` takes `use` for its own argument),
    though the tactic it ran is `srun (eauto) use: L`: the tactic inside `srun` is put in parentheses to replay.
    """
    for message in printed:
        match = _REPLACE.search(message)
        if match:
            tactic = " ".join(match.group(1).split())
            return _SRUN.sub(r"srun (\1)\2", tactic)
    return None


def use_lemmas(tactic: str) -> list[str]:
    """The lemma names a sauto-family tactic is given with `use:` (`hauto lq: on use: a, b` -> [a, b])."""
    names: list[str] = []
    for chain in re.split(r";|\|\|", tactic):
        options = list(_OPTION.finditer(chain))
        for i, option in enumerate(options):
            if option.group(1) != "use":
                continue
            end = options[i + 1].start() if i + 1 < len(options) else len(chain)
            names.extend(n.strip() for n in chain[option.end() : end].split(",") if n.strip())
    return names
