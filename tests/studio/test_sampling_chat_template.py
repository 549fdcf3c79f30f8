"""A campaign sampled from an instruct checkpoint sees prompts the way the checkpoint was trained on them
(through its chat template, by default when it has one), and the labeller sees the special tokens the model
wrote, with only the stop token at the end of each response dropped."""

from __future__ import annotations

import shutil

import pytest
import torch

from rlxf.models.loading import load_tokenizer
from rlxf.rollout import engine as engine_module
from rlxf.rollout.generation import Generation
from rlxf.rollout.sampling import SamplingParams
from rlxf.studio.limits import InputError
from rlxf.studio.sampling import sample_campaign_pairs
from tests.studio.helpers import write_jsonl

PROMPTS = ["10+3=", "11+4="]


@pytest.fixture
def prompts_file(tmp_path):
    return str(write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": p} for p in PROMPTS]))


@pytest.fixture
def engine_calls(monkeypatch):
    """What the studio hands the engine: its stop ids and the prompt ids of every generate call (the real
    engine still samples)."""
    calls, build = [], engine_module.build_engine

    def spying_build(name, model, eos_id, pad_id, options=None):
        engine = build(name, model, eos_id, pad_id, options)
        generate = engine.generate

        def spying_generate(prompts, params, generator=None):
            calls.append({"stop_ids": eos_id, "prompts": [list(p) for p in prompts]})
            return generate(prompts, params, generator)

        engine.generate = spying_generate
        return engine

    monkeypatch.setattr(engine_module, "build_engine", spying_build)
    return calls


def without_template(tmp_path, tiny_model_dir) -> str:
    """The tiny checkpoint with its chat template removed (a base model)."""
    folder = tmp_path / "base"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "chat_template.jinja").unlink()
    assert load_tokenizer(str(folder)).chat_template is None
    return str(folder)


PARAMS = SamplingParams(n=4, temperature=1.0, max_new_tokens=4)


def test_the_chat_template_is_used_by_default_and_recorded(tiny_model_dir, prompts_file, engine_calls):
    tokenizer = load_tokenizer(tiny_model_dir)
    _, sampling = sample_campaign_pairs(tiny_model_dir, prompts_file, PARAMS, limit=2, seed=1)
    assert sampling["chat_template"] is True
    (call,) = engine_calls
    rendered = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
                for p in PROMPTS]
    assert rendered == ["user: 10+3=\nassistant: ", "user: 11+4=\nassistant: "]  # the char tokenizer's template
    assert call["prompts"] == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert [tokenizer.decode(p) for p in call["prompts"]] == rendered
    assert call["stop_ids"] == [tokenizer.eos_token_id] == [2]  # its template ends a turn with EOS


def test_chat_template_false_sends_the_raw_prompt(tiny_model_dir, prompts_file, engine_calls):
    tokenizer = load_tokenizer(tiny_model_dir)
    _, sampling = sample_campaign_pairs(tiny_model_dir, prompts_file, PARAMS, limit=2, seed=1, chat_template=False)
    assert sampling["chat_template"] is False
    assert engine_calls[0]["prompts"] == [[5, 4, 76, 7, 84], [5, 5, 76, 8, 84]]  # one token per character
    assert [tokenizer.decode(p) for p in engine_calls[0]["prompts"]] == PROMPTS


def test_a_checkpoint_without_a_template_gets_raw_prompts(tmp_path, tiny_model_dir, prompts_file, engine_calls):
    base = without_template(tmp_path, tiny_model_dir)
    _, sampling = sample_campaign_pairs(base, prompts_file, PARAMS, limit=2, seed=1)
    assert sampling["chat_template"] is False
    assert [load_tokenizer(base).decode(p) for p in engine_calls[0]["prompts"]] == PROMPTS
    with pytest.raises(InputError, match="has no chat template"):
        sample_campaign_pairs(base, prompts_file, PARAMS, limit=2, chat_template=True)


class ScriptedEngine:
    """Returns fixed responses (token strings per sample): a random tiny model does not write special tokens
    on demand, and what is under test is how the studio turns response ids into the labeller's text."""

    def __init__(self, tokenizer, samples: list[list[str]], stopped: list[bool]) -> None:
        self.tokenizer, self.samples, self.stopped = tokenizer, samples, stopped

    def generate(self, prompts, params, generator=None) -> Generation:
        width = max(len(s) for s in self.samples) + 2
        ids = torch.full((len(self.samples), width), self.tokenizer.pad_token_id)
        mask = torch.zeros_like(ids)
        for row, tokens in enumerate(self.samples):
            ids[row, :len(tokens)] = torch.tensor(self.tokenizer.convert_tokens_to_ids(tokens))
            mask[row, :len(tokens)] = 1
        return Generation(prompt_index=torch.arange(len(self.samples)) // params.n, response_ids=ids,
                          response_mask=mask, log_probs=torch.zeros(ids.shape), stopped=torch.tensor(self.stopped),
                          version=0)


def test_special_tokens_the_model_wrote_stay_visible(monkeypatch, tiny_model_dir, prompts_file):
    tokenizer = load_tokenizer(tiny_model_dir)
    samples = [["x", "<s>", "y", "</s>"],  # a BOS inside the answer, then the stop token: only the stop goes
               ["<unk>", "z", "z"],  # hit max_new_tokens: nothing to strip
               ["a", "<pad>", "b", "</s>"],  # a pad token the model wrote (in the mask) is its text, not padding
               ["a", "<pad>", "b", "</s>"]]  # the same again: one distinct response, no pair
    scripted = ScriptedEngine(tokenizer, samples, stopped=[True, False, True, True])
    monkeypatch.setattr(engine_module, "build_engine", lambda *args, **kwargs: scripted)
    pairs, _ = sample_campaign_pairs(tiny_model_dir, prompts_file, SamplingParams(n=2, max_new_tokens=4), limit=2)
    assert [(row["prompt"], a, b) for row, a, b in pairs] == [("10+3=", "x<s>y", "<unk>zz")]
    # the decode the studio used before this, for contrast: every special token gone
    assert tokenizer.decode(tokenizer.convert_tokens_to_ids(samples[0]), skip_special_tokens=True) == "xy"


def test_the_sample_endpoint_takes_and_stores_the_choice(tmp_path, tiny_model_dir, prompts_file):
    from fastapi.testclient import TestClient

    from rlxf.studio.app import StudioSettings, make_app

    runs = tmp_path / "runs"
    runs.mkdir()
    c = TestClient(make_app(StudioSettings(runs, runs / "studio.sqlite", None)), base_url="http://127.0.0.1:8765")
    body = {"checkpoint": tiny_model_dir, "prompts": prompts_file, "n": 4, "max_new_tokens": 4, "limit": 2}
    refused = c.post("/api/campaigns/sample", json={**body, "chat_template": "yes"})
    assert refused.status_code == 400 and "`chat_template` must be true, false or null" in refused.text
    stored = {}
    for choice in (None, False):  # null: the template, since the tiny tokenizer has one
        made = c.post("/api/campaigns/sample", json={**body, "name": f"sums {choice}", "chat_template": choice}).json()
        stored[choice] = c.get(f"/api/campaigns/{made['id']}").json()["sampling"]["chat_template"]
    assert stored == {None: True, False: False}


def test_a_large_campaign_is_sampled_a_bounded_number_of_prompts_at_a_time(
        monkeypatch, tmp_path, tiny_model_dir, engine_calls):
    from rlxf.studio import sampling

    monkeypatch.setattr(sampling, "PROMPTS_PER_GENERATE", 2)
    prompts = [f"{a}+{a}=" for a in range(10, 15)]
    path = str(write_jsonl(tmp_path / "five.jsonl", [{"prompt": p} for p in prompts]))
    pairs, _ = sample_campaign_pairs(tiny_model_dir, path, SamplingParams(n=4, temperature=1.5, max_new_tokens=4),
                                     limit=5, seed=1)
    assert [len(call["prompts"]) for call in engine_calls] == [2, 2, 1]
    tokenizer = load_tokenizer(tiny_model_dir)
    sent = [tokenizer.decode(p) for call in engine_calls for p in call["prompts"]]
    assert sent == [f"user: {p}\nassistant: " for p in prompts]  # every prompt once, in order
    assert [row["prompt"] for row, _, _ in pairs] == prompts  # each prompt's pair from its own samples


class PromptRecorder:
    """A reward that scores the first response 1 and records the prompt texts it is handed."""

    def __init__(self):
        self.prompts = []

    def score(self, prompts, responses, metadata):
        from rlxf.rewards.base import RewardOutput

        self.prompts += list(prompts)
        half = len(prompts) // 2
        return RewardOutput(scores=[1.0] * half + [0.0] * half, components={})


@pytest.mark.parametrize("chat_template", [True, False])
def test_ai_labels_hand_the_reward_the_prompt_as_rl_does(tmp_path, tiny_model_dir, chat_template):
    from rlxf.studio.ai_labels import label_with_reward
    from rlxf.studio.campaigns import create_campaign
    from rlxf.studio.store import Store

    store = Store(tmp_path / "studio.sqlite")
    pairs = [({"prompt": p, "answer": "13"}, "13", "12") for p in PROMPTS]
    cid = create_campaign(store, "sampled", pairs, "sampled", checkpoint=tiny_model_dir,
                          sampling={"chat_template": chat_template})
    reward = PromptRecorder()
    assert label_with_reward(store, cid, reward, "rm") == 2
    tokenizer = load_tokenizer(tiny_model_dir)
    # what a rollout of that checkpoint decodes and hands the reward (loop: reward_model trains on the same)
    stored = [row["prompt"] for row in store.query("SELECT prompt FROM pairs ORDER BY position")]
    rendered = [tokenizer.decode(tokenizer(f"user: {p}\nassistant: ", add_special_tokens=False)["input_ids"],
                                 skip_special_tokens=True) for p in stored]
    expected = rendered if chat_template else stored
    assert reward.prompts == expected + expected  # both responses of each pair
    assert chat_template is False or rendered[0] != stored[0]  # the template does change the text
