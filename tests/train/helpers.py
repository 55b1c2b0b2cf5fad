"""Small real inputs for the training tests: a tiny base checkpoint, items and filtered rollouts in a lake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from aitp.lake import write_partition
from aitp.policies.tiny import TinyConfig, TinyTransformer, save_checkpoint
from aitp.reasoning.evaluate import item_row as library_item_row
from aitp.reasoning.filtering import filter_rows
from aitp.reasoning.items import Item, generate_items

SMALL = TinyConfig(n_layer=2, n_head=4, d_model=64, max_seq_len=512)
SYSTEM = "Answer in tags."  # short prompts keep CPU training fast; the default system prompt is ~330 bytes


def tiny_base(path: Path, seed: int = 0) -> Path:
    """A randomly initialised tiny checkpoint (2 layers, d=64)."""
    torch.manual_seed(seed)
    return save_checkpoint(path, TinyTransformer(SMALL))


def item_row(item: Item, split: str = "train") -> dict[str, Any]:
    """The library's items row, with the split given (eval rows stand for an experiment's held-out set)."""
    return {**library_item_row(item), "split": split}


def write_items(home: Path, experiment: str, iteration: int, n: int, level: int = 0) -> list[Item]:
    """Commit n train items of basic_arithmetic at a curriculum level to the lake."""
    items = generate_items("basic_arithmetic", n, 0, "train", level)
    write_partition(home, "items", experiment, iteration, [item_row(i) for i in items])
    return items


def rollout_rows(items: list[Item], scores: list[list[float]], iteration: int = 0) -> list[dict[str, Any]]:
    """One group per item with the given final scores; completion k of item i is `<answer>i-k</answer>`."""
    rows = []
    for i, (item, group) in enumerate(zip(items, scores)):
        prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item.question}]
        for k, score in enumerate(group):
            rows.append(
                {
                    "item_id": item.item_id,
                    "task": item.task,
                    "config_json": item.config,
                    "seed": item.seed,
                    "item_index": item.index,
                    "split": "train",
                    "difficulty_level": item.level,
                    "gold_answer": item.answer,
                    "group_id": f"g{iteration}-{i}",
                    "sample_index": k,
                    "prompt": json.dumps(prompt),
                    "completion": f"<answer>{i}-{k}</answer>",
                    "raw_score": score,
                    "final_score": score,
                    "model_version": "m0",
                }
            )
    return rows


def write_rollouts(home: Path, experiment: str, iteration: int, rows: list[dict[str, Any]], threshold: float = 0.7):
    """Filter rows with the seed's rule and commit them."""
    write_partition(home, "rollouts", experiment, iteration, filter_rows(rows, threshold))


def byte_bpe():
    """A byte-level BPE tokenizer with no merges: offline, tiny, and loadable by AutoTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<s>", "</s>", *sorted(alphabet)])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<pad>", "<s>", "</s>"])
    return tok


def random_llama(
    path: Path, tokenizer: Any, width: int = 64, max_positions: int = 512, seed: int = 0, head_scale: float = 1.0
) -> Path:
    """A randomly initialised 2-layer Llama around `tokenizer`, both saved at `path`: a Hugging Face policy that
    loads and samples in seconds. `head_scale` sharpens the output layer, so greedy choices lie far from ties."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    if head_scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(head_scale)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def hf_llama_base(path: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer Hugging Face Llama (width 32) with a byte-level tokenizer, saved at `path`."""
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=byte_bpe(), bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    return random_llama(path, tokenizer, width=32, max_positions=256, seed=seed)
