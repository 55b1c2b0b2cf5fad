"""The documentation a user reads stays true: short README, its two commands, commands, paths and links that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from aitp.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAIN_COMMAND = "bash scripts/setup.sh && .venv/bin/aitp run"
README_MAX_LINES = 200


def _docs() -> list[Path]:
    """README.md and docs/*.md: the pages whose commands and paths must exist."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def _linked_pages() -> list[Path]:
    """The pages whose relative links must resolve."""
    return [*_docs(), ROOT / "benchmarks" / "README.md"]


def _code(text: str) -> str:
    """The text of fenced blocks (shell comments left out) and inline code spans: where commands are written."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    fenced = [re.sub(r"(^|\s)#.*", "", block) for block in blocks]
    outside = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    return "\n".join(fenced + re.findall(r"`([^`\n]+)`", outside))


def _ci_test_command() -> str:
    """The command `.ci/run` runs: its last line."""
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    return lines[-1].strip()


def test_readme_is_short() -> None:
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move detail to docs/ or benchmarks/results/"


def test_readme_two_commands_verbatim() -> None:
    lines = [line.rstrip() for line in README.read_text().splitlines()]
    section = lines[lines.index("## Two commands") :]
    section = section[: next(i for i, line in enumerate(section[1:], 1) if line.startswith("## "))]
    assert MAIN_COMMAND in section, "README's main command changed"
    assert _ci_test_command() in section, ".ci/run and the README's test command differ"
    assert section.index(MAIN_COMMAND) < section.index(_ci_test_command())


def _named_commands() -> set[tuple[str, ...]]:
    """Every `aitp <command> [<subcommand>]` written in the docs' code, as a tuple of words."""
    found = set()
    for page in _docs():
        for match in re.finditer(r"(?<![\w-])aitp((?: [a-z][a-z-]*){1,2})", _code(page.read_text())):
            found.add(tuple(match.group(1).split()))
    return found


def _resolve(words: tuple[str, ...]) -> list[str] | None:
    """The command path the words name (a group's subcommand included), or None when the first is unknown."""
    command = typer.main.get_command(app).commands.get(words[0])
    if command is None:
        return None
    subcommands = getattr(command, "commands", None)  # a group: the second word must be one of its commands
    if subcommands is not None and len(words) > 1:
        return [words[0], words[1]] if words[1] in subcommands else None
    return [words[0]]


def test_named_commands_exist() -> None:
    named = _named_commands()
    assert ("run",) in {w[:1] for w in named}, "the pattern found no `aitp run`: the search is broken"
    runner = CliRunner()
    unknown = sorted(" ".join(w) for w in named if _resolve(w) is None)
    assert not unknown, f"docs name commands that do not exist: {unknown}"
    for path in sorted({tuple(_resolve(w)) for w in named}):
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, f"`aitp {' '.join(path)} --help` failed: {result.output}"


@pytest.mark.parametrize("pattern", [r"configs/[\w./-]+\.yaml", r"benchmarks/[\w/-]+\.py"])
def test_named_paths_exist(pattern: str) -> None:
    missing = set()
    for page in _linked_pages():
        for path in re.findall(pattern, page.read_text()):
            if not (ROOT / path).is_file():
                missing.add(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, f"docs name files that do not exist: {sorted(missing)}"


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_relative_links_resolve() -> None:
    broken = []
    for page in _linked_pages():
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, f"broken links: {broken}"
