"""The Coq tactic allowlist and a small parser that checks a tactic string before Coq sees it.

A tactic is accepted when it is one Ltac expression (no sentence end, comment or string) whose
every tactic head is in `COQ_TACTICS`, combined only with the tacticals below, and whose
identifiers avoid the deny list (vernacular commands, `admit`, the theorem being proved...).
Arguments (terms, patterns) are kept as written.

CoqHammer's automation (`COQ_AUTOMATION_TACTICS`: `sauto`, `hammer`...) is accepted only where the
session loaded it (`CoqEnv(automation=True)`); elsewhere it is refused in one line naming the fix.
Their options (`sauto lq: on use: Nat.add_comm, Nat.mul_comm`) are arguments like any other, so
the theorem's own name is refused there too.
"""

from __future__ import annotations

import re

from aitp.proving.errors import TacticRejectedError

COQ_TACTICS: frozenset[str] = frozenset(
    """
    intro intros revert generalize clear rename subst simpl cbn cbv compute hnf red unfold fold
    reflexivity symmetry transitivity assumption exact apply auto trivial easy eauto lia nia ring
    ring_simplify field tauto intuition firstorder congruence discriminate injection inversion
    inversion_clear induction destruct case elim split left right exists constructor f_equal
    rewrite replace remember change pattern assert enough cut pose set specialize contradiction
    exfalso absurd contradict decide btauto lra
    """.split()
)

COQ_AUTOMATION_TACTICS: frozenset[str] = frozenset(
    """
    sauto hauto qauto ssimpl qsimpl sfirstorder sintuition strivial scongruence scrush hcrush qcrush
    fcrush hfcrush qfcrush ecrush hecrush qecrush sblast qblast best sbest hbest hammer
    """.split()
)
"""CoqHammer 1.3.2's tactics (Debian's libcoq-hammer for Coq 8.16; `lauto` and `sdone` came later).
`hammer` calls external provers (E here); the rest are its own proof search, no external prover."""

# Deeper nesting than this is never a useful tactic, and the recursive parser must stay well inside
# Python's recursion limit (990 nested parentheses fit under the length limit).
MAX_NESTING = 48

# Tacticals taking one tactic, and `do N`.
_PREFIX_TACTICALS = frozenset({"try", "repeat", "progress", "now"})
# CoqHammer's tactical `srun TACTIC OPTIONS` (how `hammer` reconstructs some proofs: `srun (eauto) use: L`).
_AUTOMATION_TACTICALS = frozenset({"srun"})
_LIST_TACTICALS = frozenset({"first", "solve"})

DENIED: frozenset[str] = frozenset(
    """
    admit Admitted give_up Abort Qed Defined Save Proof Drop Load Require Import Export Axiom
    Axioms Parameter Parameters Conjecture Hypothesis Variable Variables Definition Fixpoint
    CoFixpoint Lemma Theorem Ltac Ltac2 Redirect Timeout Time Fail Succeed Set Unset Restart Undo
    Back BackTo Reset Declare Extraction Extract Module Section End Include Instance Existing
    Hint Add Remove Local Global Program Obligation Next Focus Unfocus Unshelve shelve
    shelve_unifiable fix cofix evar instantiate ltac ltac2 idtac_ native_compute vm_compute
    native_cast_no_check vm_cast_no_check change_no_check abstract transparent_abstract external
    Optimize Show Print Check Eval Compute Search Locate About Debug Info Cd Pwd Back Quit
    """.split()
)

_TOKEN = re.compile(
    r"\s*(?:(?P<ident>[A-Za-z_][A-Za-z0-9_']*(?:\.[A-Za-z_][A-Za-z0-9_']*)*)"
    r"|(?P<num>[0-9]+)"
    r"|(?P<op>\|\||:=|->|<-|<->|=>|[;|\[\](){}:,=<>+*\-/^~@%!?&$#'`\\]))"
)


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise TacticRejectedError(f"unexpected character {text[pos:].lstrip()[:1]!r} in tactic")
        tokens.append(match.group("ident") or match.group("num") or match.group("op"))
        pos = match.end()
    return tokens


class _Parser:
    """Recursive descent over tokens: seq := alt (';' (alt | '[' branches ']'))*."""

    def __init__(self, tokens: list[str], forbidden: frozenset[str], automation: bool = False) -> None:
        self.tokens = tokens
        self.pos = 0
        self.forbidden = forbidden
        self.automation = automation
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise TacticRejectedError(f"expected {expected or 'a token'} but found {token or 'the end'}")
        self.pos += 1
        return token

    def seq(self) -> None:
        self.alt()
        while self.peek() == ";":
            self.take(";")
            if self.peek() == "[":
                self.branches()
            else:
                self.alt()

    def branches(self) -> None:
        self.take("[")
        while True:
            if self.peek() not in ("|", "]"):
                self.seq()
            if self.peek() == "|":
                self.take("|")
                continue
            self.take("]")
            return

    def alt(self) -> None:
        self.unary()
        while self.peek() in ("||", "+"):
            self.take()
            self.unary()

    def unary(self) -> None:
        # Every recursive path (parentheses, tacticals, branches, `by`) passes through here.
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise TacticRejectedError(f"tactic nested deeper than {MAX_NESTING} levels")
        self._unary()
        self.depth -= 1

    def _unary(self) -> None:
        token = self.peek()
        if token is None:
            raise TacticRejectedError("empty tactic")
        if token == "(":
            self.take("(")
            self.seq()
            self.take(")")
        elif token in _PREFIX_TACTICALS:
            self.take()
            self.unary()
        elif token == "do":
            self.take()
            if not (self.peek() or "").isdigit():
                raise TacticRejectedError("`do` needs a number")
            self.take()
            self.unary()
        elif token in _LIST_TACTICALS:
            self.take()
            self.branches()
        elif token in _AUTOMATION_TACTICALS:
            self.refuse_without_automation(self.take())
            self.unary()
            self.arguments()
        else:
            self.atomic()

    def refuse_without_automation(self, head: str) -> None:
        if not self.automation:
            from aitp.proving.coq.hammer import automation_refusal  # shells out to coqc only on refusal

            raise TacticRejectedError(automation_refusal(head))

    def atomic(self) -> None:
        head = self.take()
        if head in COQ_AUTOMATION_TACTICS:
            self.refuse_without_automation(head)
        elif head not in COQ_TACTICS:
            raise TacticRejectedError(f"tactic '{head}' is not in the Coq allowlist")
        self.arguments()

    def arguments(self) -> None:
        """A tactic's arguments, kept as written, up to the tactical that ends it."""
        depth = 0
        while (token := self.peek()) is not None:
            if depth == 0 and token in (";", "||", "|", "]", ")", "+"):
                return
            if depth == 0 and token == "by":
                self.take()
                self.unary()
                continue
            if token in ("(", "[", "{"):
                depth += 1
            elif token in (")", "]", "}"):
                depth -= 1
            self.take()


def cited_names(tactic: str) -> list[str]:
    """The identifiers a tactic names (lemmas, hypotheses, tactics alike), in order: what a premise rule checks.

    A name followed by `:` is an option of a CoqHammer tactic (`inv:`, `use:`) or a binder, never a citation.
    """
    tokens = _tokenize(tactic)
    following = [*tokens[1:], ""]
    return [t for t, after in zip(tokens, following) if (t[0].isalpha() or t[0] == "_") and after != ":"]


def parse_coq_tactic(text: str, forbidden_names: frozenset[str] = frozenset(), automation: bool = False) -> str:
    """Return the tactic normalised (one trailing period dropped, spaces collapsed) or raise TacticRejectedError.

    `automation`: the session loaded CoqHammer, so its tactics are accepted.
    """
    tactic = " ".join(text.split())
    if tactic.endswith("."):
        tactic = tactic[:-1].rstrip()
    if not tactic:
        raise TacticRejectedError("empty tactic")
    if len(tactic) > 2000:
        raise TacticRejectedError("tactic longer than 2000 characters")
    if not tactic.isascii() or not tactic.isprintable():
        raise TacticRejectedError("tactic has non-ASCII or control characters")
    if '"' in tactic or "(*" in tactic:
        raise TacticRejectedError("strings and comments are not allowed in tactics")
    if re.search(r"\.(\s|$)", tactic) or ".." in tactic:
        raise TacticRejectedError("a tactic must be a single sentence (no '.' terminator inside)")
    tokens = _tokenize(tactic)
    for token in tokens:
        for part in (token, token.rsplit(".", 1)[-1]):
            if part in DENIED:
                raise TacticRejectedError(f"'{part}' is not allowed in a tactic")
        if token in forbidden_names or token.rsplit(".", 1)[-1] in forbidden_names:
            raise TacticRejectedError(f"'{token}' is the theorem being proved")
    if len(tokens) >= 2 and tokens[1] == ":" and (tokens[0].isdigit() or tokens[0] == "all"):
        raise TacticRejectedError("goal selectors are not allowed: the search picks the goal")
    parser = _Parser(tokens, forbidden_names, automation)
    parser.seq()
    if parser.peek() is not None:
        raise TacticRejectedError(f"unexpected '{parser.peek()}' after the tactic")
    return tactic
