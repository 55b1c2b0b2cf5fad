"""What a library file says before one of its lemmas, so a human proof can be replayed where it was written.

A stdlib script relies on its file: imports and opened scopes (short names, numerals), local notations,
Ltac and hints, and the variables of its enclosing sections, which the closed lemma takes as its first
arguments. Read from the .v source with the extractor's own sentence splitter, scoped as Coq scopes
them (what a section or module declares ends with it). Replay runs the `imports`, then imports the
lemma's own modules, then the `locals`, then introduces the section variables the lemma was closed over
and the binders the lemma names before its colon (`Lemma f (n : nat) : ...`), as its proof expects. `Utf8`
imports are left out: they change only how goals print, and goals must print as search prints them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from aitp.proving.coq.extract import _END, _LEMMA, _MODULE, _SECTION, sentences, strip_comments

_ATTRIBUTE = r"(?:#\[[^\]]*\]\s*|(?:Local|Global)\s+)*"
_IMPORTS = re.compile(rf"^{_ATTRIBUTE}(?:(?:From\s+\S+\s+)?Require\s|Import\s|Export\s|Open\s+(?:Local\s+)?Scope\s)")
_LOCALS = re.compile(
    rf"^{_ATTRIBUTE}(?:Notation|Infix|Ltac|Hint|Create\s+HintDb|Arguments|Opaque|Transparent|Set|Unset)\b"
)
_UTF8 = re.compile(r"\bUtf8(?:_core)?\b")  # printing only: goals stay rendered as search renders them
_LOCALITY = re.compile(r"^(?:#\[\s*local\s*\]|Local)\s")
_VARIABLES = re.compile(rf"^{_ATTRIBUTE}(?:Variables?|Hypothes[ie]s|Context)\s+(.*)$", re.S)


@dataclass
class _Frame:
    kind: str  # module, section or skip (module types, functors)
    name: str
    imports: list[str] = field(default_factory=list)
    locals: list[str] = field(default_factory=list)
    variables: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class LemmaContext:
    """A lemma's file context: sentences to run before and after its modules are imported, section variables."""

    imports: tuple[str, ...] = ()
    locals: tuple[str, ...] = ()
    section_variables: tuple[tuple[str, str], ...] = ()  # (name, declared type), in declaration order
    binders: tuple[str, ...] = ()  # named before the lemma's colon: in scope in its proof from the start


def typed_binders(text: str) -> list[tuple[str, str]]:
    """(name, type) of each binder a list declares: `A B : T`, `x (y : T) {f : U}`; `?` names an anonymous one."""
    text = text.strip().rstrip(".")
    out: list[tuple[str, str]] = []
    bare: list[str] = []  # names outside brackets: typed by a later top-level colon, else left to inference
    depth, start, word = 0, 0, ""
    for i, char in enumerate(text):
        if depth == 0 and char == ":" and not text.startswith(":=", i):
            return out + [(name, text[i + 1 :].strip()) for name in [*bare, *word.split()]]
        if char in "({[":
            depth += 1
            if depth == 1:
                out.extend((name, "") for name in [*bare, *word.split()])
                bare, word, start = [], "", i + 1
        elif char in ")}]":
            depth -= 1
            if depth == 0:
                head, colon, type_ = text[start:i].partition(":")
                if colon or text[start - 2 : start - 1] != "`":
                    out.extend((name, type_.strip()) for name in head.split())
                else:  # a generalizing binder `{C x}: an instance Coq names itself
                    out.append(("?", head.strip()))
        elif depth == 0 and char != "`":
            if char.isspace():
                bare.extend(word.split())
                word = ""
            else:
                word += char
    return out + [(name, "") for name in [*bare, *word.split()]]


def binder_names(text: str) -> list[str]:
    """Names a binder list declares, `?` for an anonymous one."""
    return [name for name, _ in typed_binders(text)]


def _before_colon(text: str) -> str:
    """The text before the first colon outside brackets (a lemma's binders, after its name)."""
    depth = 0
    for i, char in enumerate(text):
        if char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
        elif depth == 0 and char == ":":
            return text[:i]
    return ""


@lru_cache(maxsize=64)
def file_contexts(source: str, logical: str) -> dict[str, LemmaContext]:
    """Every lemma of one .v file, by qualified name, with the context in force where it is stated."""
    out: dict[str, LemmaContext] = {}
    stack: list[_Frame] = [_Frame("module", logical)]
    for sentence in sentences(strip_comments(Path(source).read_text(errors="replace"))):
        frame = stack[-1]
        if m := _LEMMA.match(sentence):
            if all(f.kind != "skip" for f in stack):
                name = ".".join(f.name for f in stack if f.kind == "module") + "." + m.group(1)
                out.setdefault(
                    name,
                    LemmaContext(
                        tuple(s for f in stack for s in f.imports),
                        tuple(s for f in stack for s in f.locals),
                        tuple(v for f in stack for v in f.variables),
                        tuple(binder_names(_before_colon(sentence[m.end() :]))),
                    ),
                )
        elif m := _MODULE.match(sentence):
            rest = m.group(3)
            if ":=" in rest and not rest.rstrip().endswith(":="):
                continue
            stack.append(_Frame("skip" if m.group(1) or rest.lstrip().startswith("(") else "module", m.group(2)))
        elif m := _SECTION.match(sentence):
            stack.append(_Frame("section", m.group(1)))
        elif m := _END.match(sentence):
            for i in range(len(stack) - 1, 0, -1):
                if stack[i].name == m.group(1):
                    del stack[i:]
                    break
        elif _IMPORTS.match(sentence) and not _UTF8.search(sentence):
            frame.imports.append(sentence + ".")
        elif _LOCALS.match(sentence) and (frame.kind == "section" or _LOCALITY.match(sentence)):
            frame.locals.append(sentence + ".")
        elif (m := _VARIABLES.match(sentence)) and frame.kind == "section":
            frame.variables.extend(typed_binders(m.group(1)))
    return out


def lemma_context(name: str, source: str, logical: str) -> LemmaContext:
    """The file context of lemma `name` (empty when its source is not readable here)."""
    if not source or not Path(source).is_file():
        return LemmaContext()
    return file_contexts(source, logical).get(name, LemmaContext())


def section_intros(context: LemmaContext) -> list[str]:
    """One sentence per section variable, in order: introduce it only if the goal's next binder has its type.

    The closed lemma takes the section variables it uses as its first arguments, dependent or not (an
    arrow prints no name), so each is tried against the next binder; one that fails was not used.
    """
    out = []
    for name, type_ in context.section_variables:
        if name == "?" or not type_:
            continue
        out.append(f"intro {name}; let aitp_t := type of {name} in unify aitp_t ({type_}).")
    return out
