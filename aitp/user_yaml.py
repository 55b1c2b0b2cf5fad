"""YAML written by users (config files, policy specs, `--set` values), read within bounds.

PyYAML builds an anchor once and shares it at every alias, so a "billion laughs" file loads in
kilobytes; the blow-up comes later, when the shared structure is copied out (JSON, pydantic), and
grows until the kernel kills the process. So the composed node graph is measured
before anything is built from it: each alias counts as the full size of what it stands for, and a
document larger than `MAX_YAML_NODES` values, or holding itself, is refused. The byte cap bounds
the composing itself (libyaml's nodes take far more memory than the text they come from); libyaml also
refuses nesting deeper than 1,000, where pure-Python PyYAML would hit the recursion limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aitp.errors import AitpError

MAX_YAML_BYTES = 256 << 10  # configs are a few KiB; the cap bounds libyaml's time and memory well above them
MAX_YAML_NODES = 100_000
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlLimitError(AitpError):
    """A YAML document too large to read safely: too many bytes, too many values after aliases, or recursive."""


def _check_bytes(size: int, source: str) -> None:
    if size > MAX_YAML_BYTES:
        raise YamlLimitError(f"{source} is {size:,} bytes, above the {MAX_YAML_BYTES:,}-byte YAML limit: shorten it")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_size(root: yaml.Node, source: str, limit: int = MAX_YAML_NODES) -> int:
    """The number of values `root` stands for with every alias expanded, stopping once past `limit`."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(c)] for c in _children(node)))
            if sizes[key] > limit:
                break
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise YamlLimitError(f"{source} holds an alias inside its own anchor (a value holding itself): remove it")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes.get(id(root), limit + 1)


def parse_yaml(text: str, source: str) -> Any:
    """One YAML document's value; YamlLimitError when too large (syntax errors stay yaml.YAMLError)."""
    _check_bytes(len(text.encode("utf-8", errors="surrogatepass")), source)
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        if expanded_size(root, source) > MAX_YAML_NODES:
            raise YamlLimitError(
                f"{source} holds more than {MAX_YAML_NODES:,} values (each use of an alias counting in full): "
                "write it with fewer aliases or values"
            )
        return loader.construct_document(root)
    except RecursionError:  # only pure-Python PyYAML recurses per nesting level; libyaml stops at 1,000
        raise YamlLimitError(f"{source} nests too deeply to read: flatten it") from None
    finally:
        loader.dispose()


def read_yaml(path: Path, source: str | None = None) -> Any:
    """A YAML file's value, its size checked before reading (UnicodeDecodeError and yaml.YAMLError pass through)."""
    source = source or f"YAML file {path}"
    _check_bytes(path.stat().st_size, source)
    with path.open("rb") as stream:
        raw = stream.read(MAX_YAML_BYTES + 1)  # a file that grew since stat is still read only so far
    return parse_yaml(raw.decode("utf-8"), source)
