"""The HOL Light tactic allowlist and parser: tactic text in, a checked s-expression out.

HOL Light tactics are OCaml code, so model text never reaches the toplevel. A tactic is parsed
here into a small AST over known tactic names, theorem names of the library (only premises of
the theorem being proved) and backquoted terms; the AST is sent as an s-expression that the
server *interprets* (terms are parsed by HOL Light's own `parse_term`, as data). Anything else,
including `;;` or OCaml expressions, is rejected before it is sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aitp.proving.errors import TacticRejectedError

# name -> argument kind: "" (none), thms (a list), thm, term, thmtac (a theorem-tactic name), conv.
HOL_TACTICS: dict[str, str] = {
    **dict.fromkeys(
        """ARITH_TAC REAL_ARITH_TAC INT_ARITH_TAC ASM_ARITH_TAC CONJ_TAC DISCH_TAC EQ_TAC GEN_TAC
        STRIP_TAC REFL_TAC ITAUT_TAC DISJ1_TAC DISJ2_TAC ANTS_TAC ABS_TAC MK_COMB_TAC BETA_TAC
        INDUCT_TAC LIST_INDUCT_TAC AP_TERM_TAC AP_THM_TAC BINOP_TAC""".split(),
        "",
    ),
    **dict.fromkeys(
        """REWRITE_TAC ASM_REWRITE_TAC ONCE_REWRITE_TAC ONCE_ASM_REWRITE_TAC PURE_REWRITE_TAC
        PURE_ONCE_REWRITE_TAC PURE_ASM_REWRITE_TAC SIMP_TAC ASM_SIMP_TAC MESON_TAC ASM_MESON_TAC
        METIS_TAC ASM_METIS_TAC""".split(),
        "thms",
    ),
    **dict.fromkeys(
        """MP_TAC MATCH_MP_TAC ACCEPT_TAC MATCH_ACCEPT_TAC DISJ_CASES_TAC SUBST1_TAC ASSUME_TAC
        STRIP_ASSUME_TAC CHOOSE_TAC CONTR_TAC SUBST_ALL_TAC""".split(),
        "thm",
    ),
    **dict.fromkeys("EXISTS_TAC X_GEN_TAC UNDISCH_TAC ASM_CASES_TAC ABBREV_TAC".split(), "term"),
    **dict.fromkeys("POP_ASSUM FIRST_ASSUM FIRST_X_ASSUM DISCH_THEN".split(), "thmtac"),
    "CONV_TAC": "conv",
}
HOL_CONVS = frozenset("ARITH_RULE REAL_ARITH INT_ARITH TAUT NUM_REDUCE_CONV REAL_RAT_REDUCE_CONV NUM_RING".split())
THM_RULES = {"GSYM": 1, "CONJUNCT1": 1, "CONJUNCT2": 1, "SPEC": 2, "SPECL": 2}

MAX_CHARS = 4000  # of the tactic as given and of its canonical form, which `run` parses again
MAX_NESTING = 48  # parentheses, tacticals and theorem rules: keeps the recursive parser far from Python's limit

_TOKEN = re.compile(r"\s*(`[^`]*`|[A-Za-z_][A-Za-z0-9_']*|[\[\];(),])")


@dataclass(frozen=True)
class HolTactic:
    """A parsed tactic: canonical HOL Light text and the s-expression the server interprets."""

    text: str
    sexp: str


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _Parser:
    def __init__(
        self, text: str, theorems: frozenset[str] | None, tactics: frozenset[str] | None, forbidden: frozenset[str]
    ) -> None:
        self.tokens = self._tokenize(text)
        self.pos = 0
        self.theorems = theorems
        self.tactics = tactics
        self.forbidden = forbidden
        self.depth = 0

    def nest(self) -> None:
        """Enter one level of nesting; every recursive path of the grammar passes through here."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise TacticRejectedError(f"tactic nested deeper than {MAX_NESTING} levels")

    @staticmethod
    def _tokenize(text: str) -> list[str]:
        tokens, pos = [], 0
        while text[pos:].strip():
            match = _TOKEN.match(text, pos)
            if not match:
                raise TacticRejectedError(f"unexpected text {text[pos:].strip()[:20]!r} in HOL Light tactic")
            tokens.append(match.group(1))
            pos = match.end()
        return tokens

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise TacticRejectedError(f"expected {expected or 'more'} but found {token or 'the end'}")
        self.pos += 1
        return token

    def tactic(self) -> tuple[str, str]:
        text, sexp = self.alt()
        while self.peek() in ("THEN", "THENL"):
            if self.take() == "THEN":
                t2, s2 = self.alt()
                text, sexp = f"{text} THEN {t2}", f"(then {sexp} {s2})"
            else:
                items = self.bracketed(self.tactic)
                text = f"{text} THENL [{'; '.join(t for t, _ in items)}]"
                sexp = f"(thenl {sexp} ({' '.join(s for _, s in items)}))"
        return text, sexp

    def alt(self) -> tuple[str, str]:
        text, sexp = self.unary()
        while self.peek() == "ORELSE":
            self.take()
            t2, s2 = self.unary()
            text, sexp = f"({text} ORELSE {t2})", f"(orelse {sexp} {s2})"
        return text, sexp

    def unary(self) -> tuple[str, str]:
        self.nest()
        token = self.peek()
        if token in ("REPEAT", "TRY"):
            self.take()
            text, sexp = self.unary()
            text, sexp = f"{token} {_paren(text)}", f"({token.lower()} {sexp})"
        elif token == "(":
            self.take("(")
            text, sexp = self.tactic()
            self.take(")")
            text = _paren(text)
        else:
            text, sexp = self.atom()
        self.depth -= 1
        return text, sexp

    def atom(self) -> tuple[str, str]:
        name = self.take()
        if name not in HOL_TACTICS or (self.tactics is not None and name not in self.tactics):
            raise TacticRejectedError(f"tactic '{name}' is not in the HOL Light allowlist")
        kind = HOL_TACTICS[name]
        if kind == "":
            return name, f"(tac {name})"
        if kind == "thms":
            items = self.bracketed(self.thm, allow_empty=True)
            return f"{name} [{'; '.join(t for t, _ in items)}]", f"(thms {name} ({' '.join(s for _, s in items)}))"
        if kind == "thm":
            text, sexp = self.thm()
            return f"{name} {_paren(text)}", f"(thm {name} {sexp})"
        if kind == "term":
            term = self.term()
            return f"{name} `{term}`", f"(term {name} {_quote(term)})"
        if kind == "thmtac":
            inner = self.take()
            if HOL_TACTICS.get(inner) != "thm" or (self.tactics is not None and inner not in self.tactics):
                raise TacticRejectedError(f"'{name}' needs a theorem-tactic such as MP_TAC, not '{inner}'")
            return f"{name} {inner}", f"(thmtac {name} {inner})"
        conv = self.conv()
        return f"{name} {conv}", f"(conv {conv})"

    def conv(self) -> str:
        """A conversion name, optionally in parentheses: `CONV_TAC NUM_REDUCE_CONV`, `CONV_TAC(ARITH_RULE)`."""
        if self.peek() == "(":
            self.take("(")
            conv = self.conv()
            self.take(")")
            return conv
        conv = self.take()
        if conv not in HOL_CONVS or (self.tactics is not None and conv not in self.tactics):
            raise TacticRejectedError(
                f"conversion '{conv}' is not in the HOL Light allowlist: use one of " + ", ".join(sorted(HOL_CONVS))
            )
        return conv

    def bracketed(self, item, allow_empty: bool = False) -> list[tuple[str, str]]:
        self.take("[")
        items = []
        if self.peek() == "]" and allow_empty:
            self.take("]")
            return items
        items.append(item())
        while self.peek() == ";":
            self.take(";")
            items.append(item())
        self.take("]")
        return items

    def term(self) -> str:
        token = self.take()
        if not (token.startswith("`") and token.endswith("`") and len(token) >= 2):
            raise TacticRejectedError(f"expected a `term` in backquotes, found {token!r}")
        body = " ".join(token[1:-1].split())
        if not body:
            raise TacticRejectedError("empty term")
        return body

    def thm(self) -> tuple[str, str]:
        self.nest()
        text, sexp = self._thm()
        self.depth -= 1
        return text, sexp

    def _thm(self) -> tuple[str, str]:
        if self.peek() == "(":
            self.take("(")
            text, sexp = self.thm()
            self.take(")")
            return text, sexp
        name = self.take()
        if name in THM_RULES:
            if name in ("GSYM", "CONJUNCT1", "CONJUNCT2"):
                text, sexp = self.thm()
                return f"{name} {_paren(text)}", f"({name.lower()} {sexp})"
            if name == "SPEC":
                term = self.term()
                text, sexp = self.thm()
                return f"SPEC `{term}` {_paren(text)}", f"(spec {_quote(term)} {sexp})"
            terms = [t for t, _ in self.bracketed(lambda: (self.term(), ""))]
            text, sexp = self.thm()
            return (
                f"SPECL [{'; '.join(f'`{t}`' for t in terms)}] {_paren(text)}",
                f"(specl ({' '.join(_quote(t) for t in terms)}) {sexp})",
            )
        if not re.fullmatch(r"[A-Z][A-Z0-9_']*", name):
            raise TacticRejectedError(f"'{name}' is not a theorem name")
        if name in self.forbidden:
            raise TacticRejectedError(f"theorem '{name}' is the theorem being proved")
        if self.theorems is not None and name not in self.theorems:
            raise TacticRejectedError(f"theorem '{name}' is not a premise available here")
        return name, f"(name {name})"


def _paren(text: str) -> str:
    """`text` as an argument: bare when it is one token or already one parenthesised group, so that
    parsing a canonical text again gives the same text."""
    if re.fullmatch(r"[A-Za-z0-9_']+|`[^`]*`|\[.*\]", text) or _one_group(text):
        return text
    return f"({text})"


def _one_group(text: str) -> bool:
    """Whether `text` is `( ... )` with the first parenthesis closed by the last (terms are skipped)."""
    if not text.startswith("("):
        return False
    depth, quoted = 0, False
    for i, char in enumerate(text):
        if char == "`":
            quoted = not quoted
        elif not quoted and char in "()":
            depth += 1 if char == "(" else -1
            if depth == 0:
                return i == len(text) - 1
    return False


def parse_hol_tactic(
    text: str,
    theorems: frozenset[str] | None = None,
    tactics: frozenset[str] | None = None,
    forbidden: frozenset[str] = frozenset(),
) -> HolTactic:
    """Parse a tactic against the allowlist: `theorems` limits theorem names (None: any), `forbidden`
    excludes some (the theorem being proved), `tactics` limits tactic names to those the server has."""
    parsed = _parse_once(text, theorems, tactics, forbidden)
    if parsed.text != text:
        # `run` parses the canonical text again, which can be longer and nest deeper (`TRY (TRY (...))`):
        # it must pass here, or a tactic would be validated and then fail.
        try:
            _parse_once(parsed.text, theorems, tactics, forbidden)
        except TacticRejectedError as exc:
            raise TacticRejectedError(f"{exc} once written out in canonical form") from None
    return parsed


def _parse_once(
    text: str, theorems: frozenset[str] | None, tactics: frozenset[str] | None, forbidden: frozenset[str]
) -> HolTactic:
    if len(text) > MAX_CHARS:
        raise TacticRejectedError(f"tactic longer than {MAX_CHARS} characters")
    if not text.isascii():
        raise TacticRejectedError("tactic has non-ASCII characters")
    parser = _Parser(text.strip(), theorems, tactics, forbidden)
    if not parser.tokens:
        raise TacticRejectedError("empty tactic")
    tactic_text, sexp = parser.tactic()
    if parser.peek() is not None:
        raise TacticRejectedError(f"unexpected '{parser.peek()}' after the tactic")
    return HolTactic(tactic_text, sexp)


def proof_sexp(step_sexps: tuple[str, list]) -> str:
    """The s-expression of a proof tree given as (tactic sexp, [children])."""
    tactic, children = step_sexps
    return f"(step {tactic} ({' '.join(proof_sexp(c) for c in children)}))"
