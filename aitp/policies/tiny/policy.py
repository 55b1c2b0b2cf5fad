"""The built-in model as a `Policy`: chat prompts through the byte tokenizer into the KV-cache sampler."""

from __future__ import annotations

import torch

from aitp.policies.base import Completion, Messages, SamplingParams
from aitp.policies.tiny.model import TinyTransformer
from aitp.policies.tiny.sampler import TinyDecoder, sample_tokens
from aitp.tokenizer import ByteTokenizer


class TinyPolicy:
    """Samples from a `TinyTransformer`; `use_cache=False` recomputes the prefix every token (reference).

    `max_rows` caps the sequences decoded together (memory of the KV cache: rows x context x 8 KiB
    per layer at the default width).
    """

    def __init__(
        self,
        model: TinyTransformer,
        tokenizer: ByteTokenizer | None = None,
        *,
        name: str = "tiny",
        version: str = "random-init",
        use_cache: bool = True,
        max_rows: int = 64,
    ) -> None:
        self.model = model
        self.max_rows = max_rows
        self.tokenizer = tokenizer or ByteTokenizer()
        self.name = name
        self.version = version
        self.use_cache = use_cache

    def sample(
        self, prompts: list[Messages], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[list[Completion]]:
        """Return `params.n` completions per prompt; `seeds[i]` alone decides prompt i's randomness."""
        return self.sample_ids([self.tokenizer.chat_prompt(m) for m in prompts], params, seeds)

    def sample_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[list[Completion]]:
        """Like `sample`, from already tokenised prompts (proof search renders its own goals)."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                return sample_tokens(
                    TinyDecoder(self.model, use_cache=self.use_cache),
                    prompt_ids,
                    params,
                    seeds,
                    eos_ids={self.tokenizer.eos_id},
                    pad_id=self.tokenizer.pad_id,
                    decode=self.tokenizer.decode,
                    max_len=self.model.config.max_seq_len,
                    max_rows=self.max_rows,
                    device=self.model.device,
                )
        finally:
            self.model.train(was_training)


def chat_example(tokenizer: ByteTokenizer, messages: Messages, completion: str) -> tuple[list[int], list[bool]]:
    """A training sequence for `messages` answered by `completion`: ids, and which ids are targets.

    The completion's bytes and the closing eos are targets (the model learns when to stop); the
    prompt is not. This is exactly what `TinyPolicy.sample` conditions on and generates.
    """
    prompt = tokenizer.chat_prompt(messages)
    answer = tokenizer.encode(completion) + [tokenizer.eos_id]
    return prompt + answer, [False] * len(prompt) + [True] * len(answer)
