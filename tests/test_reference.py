"""The generated references: committed copies current, every config key, lake table and view in them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest
from pydantic import BaseModel, Field

from aitp.lake.schemas import SCHEMAS
from aitp.lake.views import CURATED_VIEWS
from aitp.loop.config import LoopConfig
from aitp.reference import (
    COMMAND,
    UNDOCUMENTED,
    Section,
    attribute_docs,
    comments_above_keys,
    field_rows,
    references,
    view_comments,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return references()


@pytest.mark.parametrize("name", ["configuration.md", "lake.md"])
def test_committed_reference_is_what_the_code_generates(generated: dict[str, str], name: str):
    committed = (DOCS / name).read_text() if (DOCS / name).is_file() else None
    assert committed == generated[name], f"docs/{name} is stale: regenerate it with `{COMMAND}` and commit it"


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every YAML key path of a config class, nested sections and list items (`tasks[].name`) included."""
    keys = []
    for name, field in model.model_fields.items():
        key = prefix + name
        keys.append(key)
        for inner in (field.annotation, *get_args(field.annotation)):
            many = get_origin(inner) is list
            inner = get_args(inner)[0] if many else inner
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                keys += _keys(inner, key + ("[]." if many else "."))  # each member of a union of sections
            if many:
                break
    return list(dict.fromkeys(keys))


def test_every_loop_config_key_appears(generated: dict[str, str]):
    keys = _keys(LoopConfig)
    assert {
        "environment.rollouts.group_size",
        "environment.tasks[].name",
        "environment.generator.base",
        "environment.self_train.lora.r",
        "fanout.chunk_items",
    } <= set(keys)
    missing = [k for k in keys if f"| `{k}` |" not in generated["configuration.md"]]
    assert missing == []


def _sections(text: str) -> dict[str, str]:
    return {part.split("`")[1]: part for part in text.split("\n### ")[1:]}


def test_every_lake_table_column_and_view_appears(generated: dict[str, str]):
    sections = _sections(generated["lake.md"])
    for table, schema in SCHEMAS.items():
        assert table in sections, table
        assert [n for n in schema.names if f"| `{n}` |" not in sections[table]] == [], table
    assert [v for v in CURATED_VIEWS if v not in sections] == []
    assert "`policy_lag` INTEGER" in sections["rollout_lineage"]


def test_attribute_docs_read_the_literal_under_a_field_and_let_a_subclass_replace_it():
    class Base(BaseModel):
        a: int = 1
        """Doc of a,
        on two lines."""
        b: int = Field(2, description="b's description")
        c: int = 3

    class Child(Base):
        a: int | None = None

    assert attribute_docs(Base) == {"a": "Doc of a,\non two lines.", "b": "b's description", "c": None}
    assert attribute_docs(Child)["a"] is None


def test_a_view_is_described_by_the_comment_above_it_if_any():
    source = """
OTHER = {"x": 1}
VIEWS: dict[str, str] = {
    "bare": "SELECT 1",
    # first line,
    # second line
    "commented": "SELECT 2",
}
"""
    assert comments_above_keys(source, "VIEWS") == {"commented": "first line, second line"}
    assert set(view_comments()) <= set(CURATED_VIEWS)


def test_a_field_row_has_its_key_type_bounds_default_and_doc():
    class Inner(BaseModel):
        """Inner things."""

        n: int = Field(3, ge=1)
        mode: Literal["a", "b"] | None = None
        """Which mode."""

    rows = list(field_rows(Section("outer.inner", Inner, Inner(n=5))))
    assert rows == [
        ("`outer.inner.n`", "`int` (>= 1)", "`5`", UNDOCUMENTED),
        ("`outer.inner.mode`", '`"a" | "b" | None`', "`null`", "Which mode."),
    ]
