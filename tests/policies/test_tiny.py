"""The built-in model: KV-cache sampling against recomputation, log-probs, seeding, stops, checkpoints."""

from dataclasses import replace

import pytest
import torch

from aitp.policies.base import Completion, SamplingParams
from aitp.policies.loading import load_policy
from aitp.policies.spec import PolicyLoadError
from aitp.policies.tiny import TinyConfig, TinyPolicy, TinyTransformer, chat_example, save_checkpoint
from aitp.policies.tiny.sampler import PromptTooLongError, pick_tokens, sample_tokens
from aitp.tokenizer import ByteTokenizer

# Small and sharp: a wide init makes logits peaked, so greedy choices are far from ties.
SMALL = TinyConfig(n_layer=2, n_head=4, d_model=64, max_seq_len=256, init_std=0.15)
PROMPTS = [
    [{"role": "user", "content": "Spell 'banana' backwards."}],
    [{"role": "system", "content": "Answer in tags."}, {"role": "user", "content": "What is 12 * 7?"}],
    [{"role": "user", "content": "hi"}],
]


@pytest.fixture(scope="module")
def model() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer(SMALL).eval()


def naive_greedy(model: TinyTransformer, prompt: list[int], steps: int, eos: int) -> list[int]:
    """Greedy decoding by a full forward pass over the unpadded sequence for every token."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            tok = int(model(torch.tensor([ids]))[0, -1].argmax())
            ids.append(tok)
            if tok == eos:
                break
    return ids[len(prompt) :]


def test_default_config_size_is_in_the_promised_range():
    assert 1_000_000 <= TinyTransformer().num_params() <= 10_000_000


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_kv_cache_greedy_matches_full_recomputation(kv_heads):
    torch.manual_seed(0)
    model = TinyTransformer(replace(SMALL, n_kv_head=kv_heads)).eval()
    params = SamplingParams(n=2, temperature=0.0, max_tokens=60)
    cached = TinyPolicy(model).sample(PROMPTS, params, seeds=[1, 2, 3])
    recomputed = TinyPolicy(model, use_cache=False).sample(PROMPTS, params, seeds=[1, 2, 3])
    tok = ByteTokenizer()
    for prompt, a, b in zip(PROMPTS, cached, recomputed):
        reference = naive_greedy(model, tok.chat_prompt(prompt), 60, tok.eos_id)
        assert [c.token_ids for c in a] == [c.token_ids for c in b] == [reference, reference]


def test_logprobs_match_a_full_forward_pass(model):
    tok = ByteTokenizer()
    params = SamplingParams(n=3, temperature=1.0, top_p=0.9, max_tokens=50)
    out = TinyPolicy(model).sample(PROMPTS, params, seeds=[5, 6, 7])
    for prompt, completions in zip(PROMPTS, out):
        prompt_ids = tok.chat_prompt(prompt)
        for c in completions:
            assert len(c.logprobs) == len(c.token_ids) == c.completion_tokens > 0
            assert c.prompt_tokens == len(prompt_ids)
            with torch.no_grad():
                full = model.token_logprobs(torch.tensor([prompt_ids + c.token_ids]))[0]
            expected = full[len(prompt_ids) - 1 :]
            assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)


def test_same_prompt_and_seed_give_same_samples_whatever_the_batch(model):
    policy = TinyPolicy(model)
    params = SamplingParams(n=3, temperature=1.0, top_p=0.95, max_tokens=40)
    alone = policy.sample([PROMPTS[0]], params, seeds=[42])[0]
    batched = policy.sample([PROMPTS[1], PROMPTS[0], PROMPTS[2]], params, seeds=[1, 42, 3])[1]
    assert [c.token_ids for c in alone] == [c.token_ids for c in batched]
    assert [c.text for c in alone] == [c.text for c in batched]
    for a, b in zip(alone, batched):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert len({tuple(c.token_ids) for c in alone}) == 3, "the n samples of one prompt should differ"
    chunked = TinyPolicy(model, max_rows=2).sample([PROMPTS[1], PROMPTS[0], PROMPTS[2]], params, seeds=[1, 42, 3])
    assert [c.token_ids for c in chunked[1]] == [c.token_ids for c in alone]
    other_seed = policy.sample([PROMPTS[0]], params, seeds=[43])[0]
    assert [c.token_ids for c in other_seed] != [c.token_ids for c in alone]


def test_stop_string_is_cut_from_the_text(model):
    policy = TinyPolicy(model)
    params = SamplingParams(n=1, temperature=0.0, max_tokens=60)
    [[free]] = policy.sample([PROMPTS[0]], params)
    stop = next(ch for ch in free.text[3:] if ch.isascii() and ch.isalnum())
    [[stopped]] = policy.sample([PROMPTS[0]], SamplingParams(n=1, temperature=0.0, max_tokens=60, stop=(stop,)))
    assert stopped.text == free.text[: free.text.find(stop)]
    assert stopped.finish_reason == "stop" and stopped.extra["stop"] == stop
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)]


class ScriptedDecoder:
    """A decoder whose every row emits the same scripted token sequence."""

    def __init__(self, script: list[int], vocab: int = 262) -> None:
        self.script, self.vocab, self.t = script, vocab, 0

    def _logits(self, rows: int) -> torch.Tensor:
        logits = torch.full((rows, self.vocab), -30.0)
        logits[:, self.script[min(self.t, len(self.script) - 1)]] = 0.0
        self.t += 1
        return logits

    def prefill(self, ids, valid, steps):
        self.rows = ids.shape[0]
        return self._logits(self.rows)

    def repeat(self, n):
        self.rows *= n

    def keep(self, rows):
        self.rows = len(rows)

    def step(self, tokens):
        assert tokens.shape == (self.rows,)
        return self._logits(self.rows)


def run_script(script: list[int], **params) -> Completion:
    tok = ByteTokenizer()
    [[c]] = sample_tokens(
        ScriptedDecoder(script),
        [[1, 2, 3]],
        SamplingParams(**params),
        [0],
        eos_ids={tok.eos_id},
        pad_id=tok.pad_id,
        decode=tok.decode,
        max_len=16,
    )
    return c


def test_eos_ends_a_sequence_and_stays_out_of_the_text():
    eos = ByteTokenizer().eos_id
    c = run_script([*b"ok", eos, *b"zz"], temperature=0.0, max_tokens=10)
    assert (c.text, c.finish_reason, c.token_ids) == ("ok", "stop", [*b"ok", eos])


def test_length_limits_and_context_limits():
    c = run_script(list(b"abcdefgh"), temperature=0.7, max_tokens=5)
    assert (c.text, c.finish_reason, c.completion_tokens) == ("abcde", "length", 5)
    c = run_script(list(b"abcdefghijklmnopq"), temperature=0.0, max_tokens=100)
    assert c.completion_tokens == 13 and c.finish_reason == "length"  # 16-token context, 3-token prompt
    assert run_script([65], max_tokens=0).token_ids == []
    with pytest.raises(PromptTooLongError):
        sample_tokens(
            ScriptedDecoder([65]),
            [[1] * 16],
            SamplingParams(),
            [0],
            eos_ids=set(),
            pad_id=0,
            decode=ByteTokenizer().decode,
            max_len=16,
        )


def test_stop_string_spanning_tokens_and_the_earliest_stop_wins():
    c = run_script(list(b"say </answer> and END"), temperature=0.0, max_tokens=30, stop=("END", "</answer>"))
    assert (c.text, c.extra["stop"], c.finish_reason) == ("say ", "</answer>", "stop")


def test_top_p_keeps_only_the_nucleus():
    logits = torch.tensor([[3.0, 2.9, -5.0, -5.0]]).repeat(500, 1)
    tokens, logprobs = pick_tokens(logits, 1.0, 0.5, torch.rand(500))
    assert set(tokens.tolist()) == {0}
    tokens, _ = pick_tokens(logits, 1.0, 0.99, torch.rand(500))
    assert set(tokens.tolist()) == {0, 1}
    assert torch.allclose(logprobs, torch.log_softmax(logits[0], -1)[0].expand(500))


def test_checkpoint_roundtrip_gives_identical_samples(model, tmp_path):
    params = SamplingParams(n=2, temperature=0.8, max_tokens=30)
    before = TinyPolicy(model).sample(PROMPTS, params, seeds=[9, 8, 7])
    path = save_checkpoint(tmp_path / "ckpt", model, meta={"step": 3})
    save_checkpoint(path, model, meta={"step": 4})  # replacing an existing checkpoint works
    policy = load_policy(str(path), device="cpu")
    assert isinstance(policy, TinyPolicy) and policy.name == "ckpt"
    after = policy.sample(PROMPTS, params, seeds=[9, 8, 7])
    assert [[c.token_ids for c in cs] for cs in after] == [[c.token_ids for c in cs] for cs in before]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no staging leftovers
    assert load_policy({"backend": "tiny", "path": str(path)}).version == policy.version


def test_missing_path_is_a_one_line_error():
    with pytest.raises(PolicyLoadError) as err:
        load_policy("/no/such/checkpoint")
    assert str(err.value) == (
        "policy path /no/such/checkpoint does not exist: pass a checkpoint directory or a .gguf file"
    )
    with pytest.raises(PolicyLoadError, match="is not a policy checkpoint"):
        load_policy(str(__import__("pathlib").Path(__file__).parent))


def test_fresh_tiny_policies_from_specs_are_seeded():
    spec = {"backend": "tiny", "config": {"n_layer": 1, "d_model": 32, "max_seq_len": 128}, "seed": 3}
    a, b = load_policy(spec, device="cpu"), load_policy(spec, device="cpu")
    assert torch.equal(a.model.embed.weight, b.model.embed.weight) and a.version == b.version
    assert load_policy("configs/model/tiny.yaml").model.config == TinyConfig()


def test_training_loss_masks_the_prompt_and_learns():
    tok = ByteTokenizer()
    ids, mask = chat_example(tok, PROMPTS[0], "ananab")
    torch.manual_seed(1)
    model = TinyTransformer(TinyConfig(n_layer=1, d_model=32, max_seq_len=128))
    x, m = torch.tensor([ids]), torch.tensor([mask])
    logits = model(x)
    manual = torch.nn.functional.cross_entropy(logits[0, :-1][m[0, 1:]], x[0, 1:][m[0, 1:]])
    assert torch.allclose(model.loss(x, m), manual, atol=1e-6)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = model.loss(x, m).item()
    for _ in range(60):
        opt.zero_grad()
        model.loss(x, m).backward()
        opt.step()
    assert model.loss(x, m).item() < first / 4
    [[c]] = TinyPolicy(model).sample([PROMPTS[0]], SamplingParams(temperature=0.0, max_tokens=20))
    assert (c.text, c.finish_reason) == ("ananab", "stop")
