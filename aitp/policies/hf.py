"""A Hugging Face causal LM from a local directory or a GGUF file, sampled on CUDA by the fast decoder.

Loading never touches the network (`local_files_only`, `HF_HUB_OFFLINE=1`). Prompts go through
the tokenizer's chat template when it has one. A Llama-family model on CUDA is sampled by
`aitp.policies.fast` (static cache, captured decode steps, continuous batching, rows sized to
free GPU memory); anything else, and every model on CPU, by the eager loop of
`aitp.policies.tiny.sampler` with the model's own `DynamicCache`, in chunks sized to free memory.
Both give seeds, stop strings, log-probs and finish reasons the same meaning. On CUDA the default
dtype is bfloat16; pass `dtype="float32"` in the spec where completions must not depend on batch makeup.
"""

from __future__ import annotations

import inspect
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from aitp.collector import collector_pauses
from aitp.errors import AitpError
from aitp.fingerprint import fingerprint
from aitp.policies import gguf_cache
from aitp.policies.base import Completion, Messages, SamplingParams
from aitp.policies.fast import supports
from aitp.policies.fast.resident import prepare_resident, sample_resident
from aitp.policies.tiny.sampler import sample_tokens

# Bytes per row and vocabulary entry of the eager loop's sampling buffers (float32 logits, softmax,
# float64 probabilities and their cumulative sum), and the share of free memory its chunks may use.
EAGER_BYTES_PER_LOGIT = 40
EAGER_MEMORY_FRACTION = 0.5


class HFLoadError(AitpError):
    """A Hugging Face model that cannot be loaded from the given local path."""


def _import_transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
    except ImportError as exc:
        raise HFLoadError("Hugging Face policies need transformers: pip install 'aitp[hf]'") from exc
    return transformers


def _gguf_as_directory(transformers: Any, gguf: Path, content_id: str) -> Path | None:
    """The converted copy of a GGUF file (written now if missing; see `gguf_cache`), or None if none can be."""

    def load_float32() -> tuple[Any, Any] | None:
        where = {"local_files_only": True, "gguf_file": gguf.name}
        model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **where)
        _drop_dequantized_gguf_quantizer(model)
        if getattr(model, "hf_quantizer", None) is not None:  # weights left in GGUF blocks: nothing to save
            return None
        return model, transformers.AutoTokenizer.from_pretrained(str(gguf.parent), **where)

    return gguf_cache.convert(gguf, content_id, load_float32)


def _drop_dequantized_gguf_quantizer(model) -> None:
    """Make a GGUF model that was de-quantised at load an ordinary one, so `save_pretrained` works.

    transformers 5 keeps its GGUF quantizer on the model even when every weight was unpacked to
    plain float tensors (no GGUF kernels here), and then refuses to save it: fine-tuned SmolLM2
    could not be checkpointed. Models whose weights stay in GGUF blocks (integer tensors) keep it.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and all(p.dtype.is_floating_point for p in model.parameters()):
        quantizer.remove_quantization_config(model)


class _HFDecoder:
    """A causal LM plus its `DynamicCache`, with left padding expressed by attention mask and positions."""

    def __init__(self, model) -> None:
        self.model = model
        # transformers 5.x renamed `past_key_values` to `cache`; the cache object is updated in place.
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    def _forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_arg: self.cache},
        )
        return out.logits[:, -1].float()

    def prefill(self, ids: Tensor, valid: Tensor, steps: int) -> Tensor:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config)
        self.mask = valid.long()
        positions = (self.mask.cumsum(1) - 1).clamp(min=0)
        self.next_pos = positions[:, -1] + 1
        return self._forward(ids, positions)

    def repeat(self, n: int) -> None:
        self.cache.batch_repeat_interleave(n)
        self.mask = self.mask.repeat_interleave(n, dim=0)
        self.next_pos = self.next_pos.repeat_interleave(n, dim=0)

    def keep(self, rows: Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.mask, self.next_pos = self.mask[rows], self.next_pos[rows]

    def step(self, tokens: Tensor) -> Tensor:
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        positions = self.next_pos[:, None]
        self.next_pos = self.next_pos + 1
        return self._forward(tokens[:, None], positions)


class HFPolicy:
    """Samples from a local Hugging Face causal LM; build it with `HFPolicy.from_path`."""

    def __init__(self, model, tokenizer, *, name: str, version: str, max_rows: int | None = None) -> None:
        """`max_rows` caps the rows decoded together; by default they are sized to free memory."""
        self.model = model
        self.max_rows = max_rows
        self.tokenizer = tokenizer
        self.name = name
        self.version = version
        config_eos = getattr(model.generation_config, "eos_token_id", None)
        eos = config_eos if isinstance(config_eos, list) else [config_eos]
        self.eos_ids = {int(i) for i in [*eos, tokenizer.eos_token_id] if i is not None}
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids, default=0)
        self.pad_id = int(pad)
        self.max_len = getattr(model.config, "max_position_embeddings", None)
        self._rust_decodes: bool | None = None  # whether the Rust tokenizer's decode equals `_decode` (probed once)
        # The latest call's timings: the fast decoder's phases (`CallStats`), or the eager loop's rows and seconds;
        # and tokenising, when the call began from chats.
        self.last_call: dict[str, float | int | list] | None = None

    @classmethod
    def from_path(
        cls, path: str | Path, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None
    ) -> HFPolicy:
        """Load a `save_pretrained` directory, or a `.gguf` file (through its converted copy: `gguf_cache`), offline."""
        transformers = _import_transformers()
        path = Path(path)
        if not path.exists():
            raise HFLoadError(f"policy path {path} does not exist: pass a checkpoint directory or a .gguf file")
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype is None:
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        elif isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        if path.is_file() and path.suffix != ".gguf":
            raise HFLoadError(f"{path} is a file but not a .gguf: pass a model directory or a .gguf file")
        version = fingerprint(path)
        where: dict[str, Any] = {"local_files_only": True}
        try:
            # A GGUF is read through its converted copy; as it is only where no copy could be written.
            model_dir = _gguf_as_directory(transformers, path, version) if path.is_file() else path
            if model_dir is None:
                source, where["gguf_file"] = str(path.parent), path.name
            else:
                source = str(model_dir)
            tokenizer = transformers.AutoTokenizer.from_pretrained(source, **where)
            model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **where)
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise HFLoadError(
                f"cannot load a Hugging Face causal LM from {path} ({first}): pass a directory written by "
                "save_pretrained (config, weights, tokenizer) or a .gguf file"
            ) from exc
        if "gguf_file" in where:
            _drop_dequantized_gguf_quantizer(model)
        model.to(device).eval()
        return cls(model, tokenizer, name=path.name, version=version)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def prompt_ids(self, messages: Messages) -> list[int]:
        """Tokenise a chat: the tokenizer's template with the generation prompt, else plain role lines."""
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        text = "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages) + "\n\nAssistant:"
        return list(self.tokenizer(text)["input_ids"])

    def prompts_ids(self, prompts: list[Messages]) -> list[list[int]]:
        """`prompt_ids` of many chats: the template rendered for all, then one tokenizer call (parallel in Rust)."""
        if not prompts:
            return []
        if getattr(self.tokenizer, "chat_template", None):
            texts = self.tokenizer.apply_chat_template(prompts, tokenize=False, add_generation_prompt=True)
            return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        return [self.prompt_ids(m) for m in prompts]

    def sample(
        self, prompts: list[Messages], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[list[Completion]]:
        """Return `params.n` completions per prompt; `seeds[i]` alone decides prompt i's randomness."""
        with collector_pauses() as paused:
            start = time.perf_counter()
            prompt_ids = self.prompts_ids(prompts)
            tokenised = time.perf_counter() - start
            groups = self.sample_ids(prompt_ids, params, seeds)
        if self.last_call is not None:
            self.last_call |= {"tokenise_s": round(tokenised, 3), "gc_s": round(paused.seconds, 3)}
        return groups

    def prepare(self, prompts: list[Messages], params: SamplingParams, rows: int) -> dict[str, float | int] | None:
        """Ready the fast decoder for a call of `rows` rows over these chats, sampling nothing; what it built.

        None where the eager loop samples (CPU, or an architecture the fast decoder does not take):
        it has nothing to build ahead.
        """
        if not self._samples_fast():
            return None
        start = time.perf_counter()
        with torch.inference_mode():
            engine = prepare_resident(
                self.model,
                self.max_rows,
                self.prompts_ids(prompts),
                params,
                rows,
                eos_ids=self.eos_ids,
                max_len=self.max_len,
            )
        if engine is None:
            return None
        return {"slots": engine.slots, "positions": engine.positions, "seconds": round(time.perf_counter() - start, 3)}

    def sample_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[list[Completion]]:
        """Like `sample`, from already tokenised prompts."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                return self._sample(prompt_ids, params, seeds)
        finally:
            self.model.train(was_training)

    def _sample(self, prompt_ids, params, seeds):
        decode = self._decode
        self.last_call = None
        if self._samples_fast():
            groups, stats = sample_resident(
                self.model,
                self.max_rows,
                prompt_ids,
                params,
                seeds,
                eos_ids=self.eos_ids,
                decode=decode,
                decode_batch=self._decode_batch,
                max_len=self.max_len,
            )
            self.last_call = stats.as_dict()
            return groups
        prompt_len = max((len(p) for p in prompt_ids), default=0)
        start = time.perf_counter()
        groups = sample_tokens(
            _HFDecoder(self.model),
            prompt_ids,
            params,
            seeds,
            eos_ids=self.eos_ids,
            pad_id=self.pad_id,
            decode=decode,
            max_len=self.max_len,
            max_rows=self.max_rows or self.eager_rows(prompt_len, prompt_len + params.max_tokens),
            device=self.device,
        )
        self.last_call = {"rows": sum(map(len, groups)), "seconds": round(time.perf_counter() - start, 3)}
        return groups

    def _samples_fast(self) -> bool:
        """Whether calls go to the fast decoder (a Llama-family model on CUDA), not the eager loop."""
        return self.device.type == "cuda" and supports(self.model)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _decode_batch(self, seqs: list[list[int]]) -> list[str]:
        """`_decode` of many sequences: through the Rust tokenizer (in parallel) where that gives the same text.

        transformers' own batch decode converts every id in Python first (most of a rollout's decoding
        time); its only change to the Rust decoder's text is an optional clean-up of spaces, which the
        probe below would show.
        """
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if self._rust_decodes is None:
            probe = self.tokenizer(" a . b , c ! d ? e 's f n't g 'm h 're i 've j 'll", add_special_tokens=False)
            ids = probe["input_ids"]
            same = backend is not None and backend.decode(ids, skip_special_tokens=True) == self._decode(ids)
            self._rust_decodes = same
        if self._rust_decodes:
            return backend.decode_batch(seqs, skip_special_tokens=True)
        return self.tokenizer.batch_decode(seqs, skip_special_tokens=True)

    def eager_rows(self, prompt_len: int, positions: int) -> int:
        """Rows the eager loop decodes together: cache, prefill scores and sampling in half the free memory."""
        config = self.model.config
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        itemsize = next(self.model.parameters()).element_size()
        per_row = config.num_hidden_layers * 2 * kv_heads * head_dim * positions * itemsize
        per_row += config.vocab_size * EAGER_BYTES_PER_LOGIT + heads * prompt_len**2 * 4
        if self.device.type == "cuda":
            free = torch.cuda.mem_get_info(self.device)[0]
        else:
            import psutil

            free = psutil.virtual_memory().available
        return max(1, int(free * EAGER_MEMORY_FRACTION) // per_row)
