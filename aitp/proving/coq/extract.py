"""Extract lemmas and their human proofs from the Coq standard library sources (.v files).

The .v files are split into sentences; `Module`/`Section`/`End` are tracked to build qualified
names; lemmas inside module types and functors are skipped (they have no global name). Every
candidate is then resolved by Coq itself (`Check @Qualified.name`), which also gives the
statement exactly as Coq prints it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from aitp.proving.coq.prefix import prover_binary, prover_env
from aitp.proving.coq.protocol import COQ_INSTALL_HINT, CoqError, CoqIdeTop
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.env import Theorem
from aitp.proving.errors import ProverUnavailableError

# In dependency order, so a theorem's premises (the names before it) are mostly loadable with it.
DEFAULT_DIRS = (
    "Init",
    "Logic",
    "Relations",
    "Wellfounded",
    "Arith",
    "Bool",
    "PArith",
    "NArith",
    "ZArith",
    "Lists",
    "Sorting",
    "Sets",
    "QArith",
    "Classes",
    "Program",
    "Strings",
    "Vectors",
    "Numbers",
)
COQ_SET_VERSION = 2  # 1: Arith, Lists, Bool; 2: DEFAULT_DIRS in dependency order
_KEYWORDS = r"(?:Lemma|Theorem|Fact|Remark|Corollary|Proposition|Property)"
_LEMMA = re.compile(rf"^(?:#\[[^\]]*\]\s*)?(?:(?:Local|Global|Polymorphic)\s+)*{_KEYWORDS}\s+([A-Za-z_][\w']*)\b")
_MODULE = re.compile(
    r"^(?:(?:Local|Global)\s+)?Module\s+(Type\s+)?(?:(?:Import|Export)\s+)?([A-Za-z_][\w']*)(.*)$", re.S
)
_SECTION = re.compile(r"^Section\s+([A-Za-z_][\w']*)")
_END = re.compile(r"^End\s+([A-Za-z_][\w']*)")
_PROOF_END = re.compile(r"^(Qed|Defined|Admitted|Abort)\b")


def coq_theories_dir() -> Path:
    """Where the Coq standard library sources live (`coqc -where`/theories)."""
    coqc = prover_binary("coqc")
    if coqc is None:
        raise ProverUnavailableError(f"Coq backend unavailable: coqc not found; {COQ_INSTALL_HINT}")
    done = subprocess.run([coqc, "-where"], capture_output=True, text=True, check=True, env=prover_env())
    return Path(done.stdout.strip()) / "theories"


_COMMENT_TOKEN = re.compile(r'"|\(\*|\*\)')


def strip_comments(text: str) -> str:
    """Remove (nested) Coq comments, keeping strings intact."""
    out, depth, last, in_string = [], 0, 0, False
    for m in _COMMENT_TOKEN.finditer(text):  # jump between the only characters that matter
        token = m.group()
        if token == '"' and depth == 0:
            in_string = not in_string
        elif in_string or (token == "*)" and depth == 0):
            continue
        elif token == "(*":
            if depth == 0:
                out.append(text[last : m.start()])
            depth += 1
        elif token == "*)":
            depth -= 1
            if depth == 0:
                last = m.end()
    if depth == 0:
        out.append(text[last:])
    return "".join(out)


def sentences(text: str) -> list[str]:
    """Split comment-free source into sentences ending at a period followed by whitespace."""
    parts = re.split(r"(?<=[^.])\.(?=\s|$)", text)
    return [" ".join(p.split()) for p in parts if p.strip()]


def parse_v_file(path: Path, logical: str) -> list[dict]:
    """Candidate lemmas of one file: qualified name, statement text, human proof, position."""
    found: list[dict] = []
    stack: list[tuple[str, str]] = []  # (kind, name): kind is module, section or skip
    current: dict | None = None
    proof: list[str] = []
    for sentence in sentences(strip_comments(path.read_text(errors="replace"))):
        if current is not None:
            if _PROOF_END.match(sentence):
                if sentence.startswith(("Qed", "Defined")):
                    current["proof"] = " ".join(s + "." for s in proof if s != "Proof")
                    found.append(current)
                current, proof = None, []
            else:
                proof.append(sentence)
            continue
        if m := _LEMMA.match(sentence):
            if any(kind == "skip" for kind, _ in stack) or ":=" in sentence:
                continue
            modules = [name for kind, name in stack if kind == "module"]
            current = {
                "name": ".".join([logical, *modules, m.group(1)]),
                "statement": sentence[m.start(1) :],
                "source": str(path),
            }
        elif m := _MODULE.match(sentence):
            rest = m.group(3)
            if ":=" in rest and not rest.rstrip().endswith(":="):
                continue  # a module alias or application: opens nothing
            kind = "skip" if m.group(1) or rest.lstrip().startswith("(") else "module"
            stack.append((kind, m.group(2)))
        elif m := _SECTION.match(sentence):
            stack.append(("section", m.group(1)))
        elif m := _END.match(sentence):
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][1] == m.group(1):
                    del stack[i:]
                    break
    return found


def extract_coq_stdlib(dirs: tuple[str, ...] = DEFAULT_DIRS, theories: Path | None = None) -> TheoremSet:
    """Extract the `coq-stdlib` set from the given stdlib directories, resolved by coqidetop."""
    theories = theories or coq_theories_dir()
    files = [f for d in dirs for f in sorted((theories / d).rglob("*.v"))]
    coq = CoqIdeTop()
    try:
        state = coq.init_state
        candidates: list[tuple[str, dict]] = []
        for f in files:
            logical = "Coq." + ".".join(f.relative_to(theories).with_suffix("").parts)
            try:
                state = coq.add(f"Require {logical}.", state)
                coq.goals()
            except CoqError:
                coq.edit_at(state)
                continue
            candidates.extend((logical, c) for c in parse_v_file(f, logical))
        theorems, seen = [], set()
        for logical, cand in candidates:
            if cand["name"] in seen:
                continue
            try:
                printed = coq.query(f"Check @{cand['name']}.", state)
            except CoqError:
                continue
            seen.add(cand["name"])
            statement = " ".join(printed.split(" : ", 1)[-1].split())
            theorems.append(
                Theorem(
                    name=cand["name"],
                    statement=statement,
                    backend="coq",
                    proof=cand["proof"],
                    source=cand["source"],
                    position=len(theorems),
                    module=logical,
                )
            )
    finally:
        coq.kill()
    return TheoremSet("coq-stdlib", "coq", theorems, [t.name for t in theorems], COQ_SET_VERSION)
