"""The LightningModule that trains a policy, and the tensors it trains on.

One module serves both backends: the built-in `tiny` transformer and Hugging Face causal LMs
(optionally wrapped in LoRA adapters). Objectives:
- sft: mean next-token loss over completion tokens (the prompt is context, not target);
- dpo: -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))) over summed completion log-probs,
  with the reference log-probs computed once, before training, by the base model: no second
  model sits beside the policy under DeepSpeed;
- grpo: the clipped surrogate of `aitp.train.grpo` over the tokens the sampler drew, the ratio taken
  against its recorded log-probs; the base model's per-token log-probs (KL reference, and the
  sampler/trainer agreement) are likewise computed once, before training.
Imports torch and lightning only (no lake, no MLflow), so it runs on a bare GPU machine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:  # the unified package; GPU images may ship only the standalone one
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - depends on the machine
    import pytorch_lightning as pl

from aitp.errors import AitpError
from aitp.train.attention import use_causal_sdpa
from aitp.train.config import COMPILE_MODES
from aitp.train.grpo import Surrogate, aligned, clipped_surrogate, logprob_gap
from aitp.train.logprobs import completion_logprobs, linear_nll, sft_nll, token_logprobs

Encoder = Callable[[list[dict[str, str]], str], tuple[list[int], list[bool]]]


LR_SCHEDULES = ("constant", "linear", "cosine")


class TrainDataError(AitpError):
    """Training examples that cannot be turned into tensors."""


@dataclass
class Trainable:
    """A policy's network with what training needs: how to encode a chat, its pad id, how it was built."""

    backend: str  # "tiny" or "hf"
    model: nn.Module
    tokenizer: Any
    encode: Encoder
    pad_id: int
    spec: Any  # the policy spec it was loaded from (rebuilt to consolidate DeepSpeed weights)
    lora: Any = None


def load_trainable(spec: Any, lora: Any = None) -> Trainable:
    """Load a policy spec (see `aitp.policies.loading`) on CPU in float32, ready to train."""
    from aitp.policies.loading import load_policy
    from aitp.policies.spec import PolicySpec

    spec = PolicySpec.parse(spec).model_copy(update={"dtype": "float32"})  # train in fp32 (tiny ignores dtype)
    policy = load_policy(spec, device="cpu")
    model = policy.model
    if hasattr(policy, "prompt_ids"):  # Hugging Face
        model.float()
        if lora is not None:
            model = _with_lora(model, lora)
        return Trainable("hf", model, policy.tokenizer, _hf_encoder(policy), policy.pad_id, spec, lora)
    if lora is not None:
        raise TrainDataError("LoRA applies to Hugging Face policies only: remove `lora` for the tiny model")
    from aitp.policies.tiny import chat_example

    tokenizer = policy.tokenizer
    return Trainable("tiny", model, tokenizer, lambda m, c: chat_example(tokenizer, m, c), tokenizer.pad_id, spec)


def _hf_encoder(policy) -> Encoder:
    eos = policy.tokenizer.eos_token_id
    eos = eos if eos in policy.eos_ids else min(policy.eos_ids)

    def encode(messages: list[dict[str, str]], completion: str) -> tuple[list[int], list[bool]]:
        prompt = policy.prompt_ids(messages)
        answer = list(policy.tokenizer(completion, add_special_tokens=False)["input_ids"]) + [eos]
        return prompt + answer, [False] * len(prompt) + [True] * len(answer)

    return encode


def _with_lora(model: nn.Module, lora: Any) -> nn.Module:
    try:
        import peft
    except ImportError as exc:
        raise TrainDataError("LoRA needs peft: pip install peft, or remove `lora` from the train config") from exc
    config = peft.LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    return peft.get_peft_model(model, config)


def fit_length(ids: list[int], targets: list[bool], max_len: int) -> tuple[list[int], list[bool]]:
    """Cut a sequence to `max_len`: the prompt loses its start first (one prompt token stays), then the end goes."""
    if len(ids) <= max_len:
        return ids, targets
    n_prompt = targets.index(True) if True in targets else len(ids)
    cut = min(len(ids) - max_len, max(0, n_prompt - 1))
    return ids[cut:][:max_len], targets[cut:][:max_len]


def _messages(prompt: Any) -> list[dict[str, str]]:
    return json.loads(prompt) if isinstance(prompt, str) else list(prompt)


def encode_examples(trainable: Trainable, examples: Sequence[dict[str, Any]], objective: str, max_len: int) -> list:
    """Token ids and target masks of each example (a chosen and a rejected sequence for dpo; for grpo the
    sampled tokens themselves, with their recorded log-probs and the advantage)."""
    encoded = []
    for number, ex in enumerate(examples):
        messages = _messages(ex["prompt"])
        if objective == "grpo":
            encoded.append(encode_sampled(trainable, messages, ex, max_len))
            continue
        chosen = fit_length(*trainable.encode(messages, ex["completion"]), max_len)
        if not any(chosen[1]):
            raise TrainDataError(f"example {number} has no completion tokens left within max_len={max_len}: raise it")
        if objective == "dpo":
            if ex.get("rejected") is None:
                raise TrainDataError(f"example {number} has no rejected completion: dpo needs pairs from groups")
            encoded.append((chosen, fit_length(*trainable.encode(messages, ex["rejected"]), max_len)))
        else:
            encoded.append(chosen)
    return encoded


def encode_sampled(trainable: Trainable, messages: list[dict[str, str]], example: dict[str, Any], max_len: int):
    """(ids, targets, sampled log-probs per position, advantage): the prompt, then the tokens the sampler drew."""
    ids, targets = trainable.encode(messages, "")
    prompt = ids[: targets.index(True)]  # the completion of "" is only the end-of-sequence token
    tokens = [int(t) for t in example["token_ids"]]
    if len(tokens) != len(example["token_logprobs"]) or not tokens:
        raise TrainDataError(
            f"rollout {example.get('group_id')}/{example.get('sample_index')} records {len(tokens)} tokens and "
            f"{len(example['token_logprobs'])} log-probs: grpo needs one per sampled token (re-run its rollouts)"
        )
    full = prompt + tokens
    marks = [False] * len(prompt) + [True] * len(tokens)
    sampled = aligned(len(prompt), example["token_logprobs"])
    kept, marks = fit_length(list(range(len(full))), marks, max_len)  # the same cut for ids and log-probs
    return [full[i] for i in kept], marks, [sampled[i] for i in kept], float(example["advantage"])


def pad_batch(seqs: Sequence[tuple[list[int], list[bool]]], pad_id: int) -> dict[str, Tensor]:
    """Right-pad (ids, targets) pairs: input_ids, attention_mask and target_mask, all (B, T)."""
    width = max(len(ids) for ids, _ in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(seqs), width), dtype=torch.bool)
    targets = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, (s, t) in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        attention[i, : len(s)] = True
        targets[i, : len(t)] = torch.tensor(t, dtype=torch.bool)
    return {"input_ids": ids, "attention_mask": attention, "target_mask": targets}


def pad_sampled(rows: Sequence[tuple], pad_id: int, references: Sequence[Tensor] | None = None) -> dict[str, Tensor]:
    """A grpo batch: pad_batch's tensors plus `sampled_logp` (B, T), `advantages` (B,), `reference_logp` (B, T)."""
    out = pad_batch([(ids, marks) for ids, marks, _, _ in rows], pad_id)
    sampled = torch.zeros(out["input_ids"].shape, dtype=torch.float32)
    for i, (_, _, logp, _) in enumerate(rows):
        sampled[i, : len(logp)] = torch.tensor(logp, dtype=torch.float32)
    out["sampled_logp"] = sampled
    out["advantages"] = torch.tensor([adv for _, _, _, adv in rows], dtype=torch.float32)
    if references is not None:
        reference = torch.zeros_like(sampled)
        for i, ref in enumerate(references):
            reference[i, : len(ref)] = ref
        out["reference_logp"] = reference
    return out


class ExampleDataset(torch.utils.data.Dataset):
    """Encoded sft or dpo examples; for dpo each also carries the reference log-probs of its pair."""

    def __init__(self, encoded: list, references: Tensor | None = None) -> None:
        self.encoded, self.references = encoded, references

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, index: int):
        if self.references is None:
            return self.encoded[index]
        return self.encoded[index], self.references[index]


class SampledDataset(torch.utils.data.Dataset):
    """grpo's samples in their planned order (`aitp.train.grpo.planned_order`): position p is sample `order[p]`,
    with its reference log-probs (or None) and the completion tokens of the optimizer step p falls in."""

    def __init__(self, encoded: list, references: Sequence[Tensor] | None, order: list[int], step_tokens: list[int]):
        self.encoded, self.references, self.order, self.step_tokens = encoded, references, order, step_tokens

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, position: int):
        index = self.order[position]
        reference = None if self.references is None else self.references[index]
        return self.encoded[index], reference, self.step_tokens[position]


def make_collate(objective: str, pad_id: int) -> Callable[[list], dict[str, Tensor]]:
    """The DataLoader's collate: one padded batch (sft; grpo with its per-token references when kept and its step's
    token count), or chosen rows then rejected rows (dpo)."""

    def collate(batch: list) -> dict[str, Tensor]:
        if objective == "sft":
            return pad_batch(batch, pad_id)
        if objective == "grpo":
            references = [ref for _, ref, _ in batch]
            out = pad_sampled([row for row, _, _ in batch], pad_id, None if references[0] is None else references)
            out["step_tokens"] = torch.tensor([tokens for _, _, tokens in batch], dtype=torch.long)
            return out
        pairs = [p for p, _ in batch]
        out = pad_batch([c for c, _ in pairs] + [r for _, r in pairs], pad_id)
        out["reference"] = torch.stack([ref for _, ref in batch])  # (B, 2): chosen, rejected
        return out

    return collate


@torch.no_grad()
def reference_logprobs(trainable: Trainable, encoded: list, batch_size: int = 8, device: Any = None) -> Tensor:
    """(N, 2) summed completion log-probs of each (chosen, rejected) pair under the base model."""
    model = trainable.model
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    was_training, home = model.training, next(model.parameters()).device
    model.eval().to(device)
    out = []
    try:
        for start in range(0, len(encoded), batch_size):
            pairs = encoded[start : start + batch_size]
            batch = pad_batch([c for c, _ in pairs] + [r for _, r in pairs], trainable.pad_id)
            sums = completion_logprobs(model, trainable.backend, {k: v.to(device) for k, v in batch.items()})
            out.append(torch.stack(sums.float().cpu().chunk(2), dim=1))
    finally:
        model.train(was_training).to(home)
    return torch.cat(out)


@torch.no_grad()
def sampled_token_logprobs(
    trainable: Trainable, encoded: list, batch_size: int = 8, device: Any = None, precision: str = "32-true"
) -> tuple[list[Tensor], float, int]:
    """Per-position log-probs of each grpo sequence under the base model (the KL reference), and the mean
    absolute gap to the sampler's recorded ones over the completion tokens (with the tokens counted).

    Computed in the arithmetic training will use (`precision`: a mixed one runs under autocast), so the gap is
    the one the clipped ratio sees at its first step.
    """
    model = trainable.model
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    half = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    was_training, home = model.training, next(model.parameters()).device
    model.eval().to(device)
    references: list[Tensor] = []
    gap_sum, tokens = 0.0, 0
    try:
        for start in range(0, len(encoded), batch_size):
            rows = encoded[start : start + batch_size]
            batch = pad_sampled(rows, trainable.pad_id)
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            with torch.autocast(device.type, dtype=half or torch.float32, enabled=half is not None):
                logp = token_logprobs(model, trainable.backend, ids, mask).float().cpu()
            logp = torch.cat([torch.zeros_like(logp[:, :1]), logp], dim=1)  # position t: log p(token t | < t)
            gap, counted = logprob_gap(batch["sampled_logp"], logp, batch["target_mask"])
            if counted:
                gap_sum, tokens = gap_sum + gap * counted, tokens + counted
            references += [logp[i, : len(row[0])] for i, row in enumerate(rows)]
    finally:
        model.train(was_training).to(home)
    return references, (gap_sum / tokens if tokens else float("nan")), tokens


def repeated_blocks(network: nn.Module) -> list[nn.Module]:
    """The network's repeated blocks (a transformer's layers): the longest list of modules of one class.

    Raises `TrainDataError` for a network with none, which cannot be compiled block by block.
    """
    lists = [m for m in network.modules() if isinstance(m, nn.ModuleList) and len(m) and len({type(b) for b in m}) == 1]
    if not lists:
        raise TrainDataError(f"{type(network).__name__} has no list of repeated blocks to compile one by one")
    return list(max(lists, key=len))


class PolicyModule(pl.LightningModule):
    """Trains `model` with the sft, dpo or grpo objective; `losses` keeps one loss per micro-batch."""

    def __init__(
        self,
        model: nn.Module,
        backend: str,
        objective: str = "sft",
        lr: float = 3e-4,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        dpo_beta: float = 0.1,
        compile: bool | str = False,
        surrogate: Surrogate | None = None,
        compile_blocks: bool = False,
        lr_schedule: str = "constant",
        completion_budget: int = 1,
    ) -> None:
        super().__init__()
        if objective not in ("sft", "dpo", "grpo"):
            raise TrainDataError(f"unknown objective '{objective}': use sft, dpo or grpo")
        if lr_schedule not in LR_SCHEDULES:
            raise TrainDataError(f"unknown lr_schedule '{lr_schedule}': use {', '.join(LR_SCHEDULES)}")
        if compile not in (False, True, *COMPILE_MODES):
            modes = ", ".join(COMPILE_MODES)
            raise TrainDataError(f"unknown compile mode '{compile}': use true, false or one of {modes}")
        self.model = model
        self.backend, self.objective = backend, objective
        self.lr, self.weight_decay, self.warmup_steps, self.dpo_beta = lr, weight_decay, warmup_steps, dpo_beta
        self.compile, self.compile_blocks = compile, compile_blocks
        self.surrogate = surrogate or Surrogate()
        self.lr_schedule = lr_schedule
        self.completion_budget = completion_budget  # dr_grpo: a row's fixed token count, the longest completion
        self.losses: list[Tensor] = []
        self._loss_fn: Callable[[dict[str, Tensor]], Tensor] | None = None
        self._head: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor] = linear_nll  # the GPU's fused sft head
        self._attention_before: str | None = None

    def on_fit_start(self) -> None:
        # The GPU path passes a Hugging Face model no padding mask (`aitp.train.logprobs`); compiled, the model
        # would build a causal one anyway and SDPA would compute the whole square (`aitp.train.attention`).
        if self.backend == "hf" and self.device.type == "cuda":
            self._attention_before = use_causal_sdpa(self.model)

    def on_fit_end(self) -> None:
        if self._attention_before is not None:  # saved and served as it was loaded
            self.model.set_attn_implementation(self._attention_before)
            self._attention_before = None

    def _loss(self, batch: dict[str, Tensor]) -> Tensor:
        """The objective's loss; with `compile`, one compiled graph of network and loss (fused norms and loss), or
        with `compile_blocks` (ZeRO-3 gathering weights between blocks) one graph per repeated block."""
        if self._loss_fn is None:
            fn = {"sft": self.sft_loss, "dpo": self.dpo_loss, "grpo": self.grpo_loss}[self.objective]
            mode = self.compile if isinstance(self.compile, str) else None
            if self.compile and self.compile_blocks:
                blocks = repeated_blocks(self.model)
                # One graph serves every block where the guards allow; under DeepSpeed they can hold each weight's
                # id (seen with torch 2.11 on two H200s), and past dynamo's limit of graphs for one code object
                # (8) the other blocks would run eager: the limit covers every block, twice (a new batch shape).
                dynamo = torch._dynamo.config
                dynamo.recompile_limit = max(dynamo.recompile_limit, 2 * len(blocks))
                for block in blocks:
                    block.forward = torch.compile(block.forward, mode=mode)
                # The fused head's elementwise work (fp32 logits, log-sum-exp, softmax gradient, a chunk at a time)
                # run eagerly was most of the GPU time that compiling by block added to a step (the whole network's
                # graph fuses it): it is compiled on its own.
                self._head = torch.compile(linear_nll, mode=mode)
            self._loss_fn = torch.compile(fn, mode=mode) if self.compile and not self.compile_blocks else fn
        if self.compile == "reduce-overhead":  # a new step: the graphs' outputs of the last one may be reused
            torch.compiler.cudagraph_mark_step_begin()
        return self._loss_fn(batch)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self._loss(batch)
        # A copy: under CUDA graphs the next step overwrites the graph's own output tensor.
        value = loss.detach().clone()
        self.losses.append(value)
        self.log("train_loss", value, batch_size=batch["input_ids"].shape[0])
        return loss

    def sft_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """Mean negative log-likelihood over the completion tokens of the batch."""
        return sft_nll(self.model, self.backend, batch, head=self._head)

    def dpo_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """The DPO loss of a batch whose first half holds chosen rows and second half rejected rows."""
        chosen, rejected = completion_logprobs(self.model, self.backend, batch).float().chunk(2)
        ref = batch["reference"].float()
        margin = (chosen - ref[:, 0]) - (rejected - ref[:, 1])
        return -F.logsigmoid(self.dpo_beta * margin).mean()

    def grpo_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """The clipped surrogate over the batch's sampled tokens (see `aitp.train.grpo`)."""
        logp = token_logprobs(self.model, self.backend, batch["input_ids"], batch["attention_mask"]).float()
        reference = batch.get("reference_logp")
        return clipped_surrogate(
            logp,
            batch["sampled_logp"][:, 1:],
            batch["advantages"],
            batch["target_mask"][:, 1:],
            self.surrogate,
            None if reference is None else reference[:, 1:],
            self._denominator(batch),
        )

    def _denominator(self, batch: dict[str, Tensor]) -> Tensor | float | None:
        """dr_grpo: the micro-batch's rows x the longest completion; dapo: the optimizer step's tokens over every
        micro-batch and device, shared out so the step's gradient is its summed token losses over that count."""
        if self.surrogate.loss == "dr_grpo":
            return float(batch["input_ids"].shape[0] * self.completion_budget)
        if self.surrogate.loss == "dapo":
            trainer = self._trainer
            shares = (trainer.accumulate_grad_batches * trainer.world_size) if trainer is not None else 1
            return batch["step_tokens"][0].to(torch.float32) / shares
        return None

    def configure_optimizers(self):
        trainable = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in trainable if p.dim() >= 2], "weight_decay": self.weight_decay},
            {"params": [p for p in trainable if p.dim() < 2], "weight_decay": 0.0},
        ]
        # Torch's AdamW even under DeepSpeed (no kernel JIT build on the GPU machine), as one fused kernel on CUDA;
        # the CPU keeps the per-parameter loop, so CPU runs give the same weights as before.
        fused = bool(trainable) and all(p.is_cuda for p in trainable) and self._unscaled()
        optimizer = torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=self.lr, betas=(0.9, 0.95), **({"fused": True} if fused else {})
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, self._rate_at)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def _rate_at(self, step: int) -> float:
        """The share of the peak rate at an optimizer step: warm-up, then constant or decaying to 0 at the end."""
        warmup = self.warmup_steps
        if step < warmup or self.lr_schedule == "constant":
            return min(1.0, (step + 1) / (warmup + 1))
        total = int(self.trainer.estimated_stepping_batches) if self._trainer is not None else step + 1
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if self.lr_schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def _unscaled(self) -> bool:
        """Whether gradients reach the optimizer final (no fp16 loss scale), so a fused AdamW may be clipped."""
        trainer = self._trainer
        return trainer is None or getattr(trainer.precision_plugin, "scaler", None) is None

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        # Lightning refuses to clip for a fused optimizer under autocast, in case it unscales internally; without a
        # loss scale (bf16) the gradients are final and clipping them is the same arithmetic as for any optimizer.
        # (DeepSpeed passes its own optimizer here and clips inside its engine: that path is left to Lightning.)
        fused = isinstance(optimizer, torch.optim.Optimizer) and optimizer.defaults.get("fused")
        if gradient_clip_val and fused and gradient_clip_algorithm in (None, "norm"):
            torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def loss_history(self, accumulate: int = 1) -> list[float]:
        """One loss per optimizer step (micro-batch losses averaged)."""
        values = torch.stack(self.losses).float().cpu().tolist() if self.losses else []
        return [
            sum(values[i : i + accumulate]) / len(values[i : i + accumulate]) for i in range(0, len(values), accumulate)
        ]
