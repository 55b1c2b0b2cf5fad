"""Byte-level tokenizer: one UTF-8 byte is one token, plus a few special tokens after the 256 bytes.

The built-in model uses it, and it is the default for measuring completion length in scoring, so
lengths are reproducible without downloading any vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS: tuple[str, ...] = ("<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>")


class ByteTokenizer:
    """Maps text to UTF-8 byte ids (0..255) and special tokens to ids from 256 up."""

    def __init__(self, special_tokens: tuple[str, ...] = SPECIAL_TOKENS) -> None:
        self.special_tokens = tuple(special_tokens)
        self.special_ids = {tok: 256 + i for i, tok in enumerate(self.special_tokens)}
        self.id_to_special = {i: tok for tok, i in self.special_ids.items()}

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.special_tokens)

    @property
    def pad_id(self) -> int:
        return self.special_ids["<|pad|>"]

    @property
    def bos_id(self) -> int:
        return self.special_ids["<|bos|>"]

    @property
    def eos_id(self) -> int:
        return self.special_ids["<|eos|>"]

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        """Encode plain text; special-token strings inside `text` are bytes like any other."""
        ids = list(text.encode("utf-8"))
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids: list[int], *, skip_special: bool = True) -> str:
        """Decode ids; bytes that do not form valid UTF-8 (a cut mid-character) become U+FFFD."""
        out = bytearray()
        parts: list[str] = []
        for i in ids:
            if i < 256:
                out.append(i)
                continue
            parts.append(out.decode("utf-8", errors="replace"))
            out = bytearray()
            if not skip_special:
                parts.append(self.id_to_special[i])
        parts.append(out.decode("utf-8", errors="replace"))
        return "".join(parts)

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Render chat messages with role tokens, ending with the assistant tag to generate after."""
        ids = [self.bos_id]
        for m in messages:
            ids.append(self.special_ids[f"<|{m['role']}|>"])
            ids.extend(self.encode(m["content"]))
            ids.append(self.eos_id)
        ids.append(self.special_ids["<|assistant|>"])
        return ids

    def save(self, path: str | Path) -> None:
        """Write the tokenizer's definition as JSON, so checkpoints carry it."""
        Path(path).write_text(json.dumps({"type": "byte", "special_tokens": list(self.special_tokens)}))

    @classmethod
    def load(cls, path: str | Path) -> ByteTokenizer:
        data = json.loads(Path(path).read_text())
        return cls(tuple(data["special_tokens"]))


def load_token_counter(path: str | Path | None = None):
    """A function counting a text's tokens: the byte tokenizer by default, else a local HF tokenizer."""
    from aitp.errors import BadInputError

    if path is None:
        return lambda text: len(text.encode("utf-8"))
    path = Path(path)
    if not path.exists():
        raise BadInputError(
            f"tokenizer path {path} does not exist: pass a local tokenizer directory or omit --tokenizer"
        )
    if path.is_file() and path.suffix == ".json" and json.loads(path.read_text()).get("type") == "byte":
        return lambda text: len(text.encode("utf-8"))
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise BadInputError("--tokenizer needs transformers: pip install transformers") from exc
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))
