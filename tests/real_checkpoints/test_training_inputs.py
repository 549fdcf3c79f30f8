"""What training reads from a real checkpoint: dropout, dtype, end-of-turn targets, BOS, prompt lengths,
offline loading, the saved tokenizer files."""

from __future__ import annotations

import json
import logging

import pytest
import torch
import transformers

from rlxf.config import Config, ConfigError
from rlxf.data.files import DatasetError
from rlxf.data.preferences import pair_batch
from rlxf.data.prompt_tokens import encode_prompts
from rlxf.data.sft_examples import sft_batch
from rlxf.loops.setup import build_run_context, load_policy
from rlxf.models.loading import ModelNotLocalError, load_causal_lm, load_tokenizer
from rlxf.models.tokenizer_files import PADDING_FILE, save_tokenizer


def _config(**sections) -> Config:
    return Config.model_validate(sections)


def _two_forwards(model) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[5, 9, 14, 30, 2, 7]])
    model.train()
    with torch.no_grad():
        return model(input_ids=ids).logits, model(input_ids=ids).logits


def test_dropout_is_off_for_training_by_default_with_a_switch(checkpoints):
    """GPT-2 with dropout 0.3 in train mode: two forwards agree (default), differ with the switch off."""
    path = checkpoints["gpt2"]
    first, second = _two_forwards(load_policy(_config(), path, "cpu"))
    assert torch.equal(first, second)
    first, second = _two_forwards(load_policy(_config(model={"disable_dropout": False}), path, "cpu"))
    assert (first - second).abs().max() > 1e-3
    saved = transformers.AutoConfig.from_pretrained(path)
    assert saved.resid_pdrop == 0.3  # the checkpoint's config is not rewritten


def test_dtype_auto_keeps_the_checkpoints_dtype(bf16_checkpoint):
    assert _config().model.dtype == "auto"
    assert next(load_policy(_config(), bf16_checkpoint, "cpu").parameters()).dtype == torch.bfloat16
    forced = load_policy(_config(model={"dtype": "float32"}), bf16_checkpoint, "cpu")
    assert next(forced.parameters()).dtype == torch.float32


def test_sft_and_dpo_targets_end_with_the_templates_end_of_turn(checkpoints):
    """ChatML ends an assistant turn with <|im_end|>; the tokenizer's EOS is <|endoftext|>."""
    tokenizer = load_tokenizer(checkpoints["qwen2"])
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token_id != im_end
    batch = sft_batch([{"prompt": "What is 12 + 7?", "sft_target": "19"},
                       {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]}],
                      tokenizer, True, 64)
    last = batch.response_mask.sum(-1) - 1
    assert batch.response_ids[torch.arange(2), last].tolist() == [im_end, im_end]
    assert batch.response_ids[0, : last[0]].tolist() == tokenizer("19", add_special_tokens=False)["input_ids"]
    pairs = pair_batch([{"prompt": "Hello", "chosen": "Hi", "rejected": "Go"}], tokenizer, True, 64)
    ends = pairs.response_ids[torch.arange(2), pairs.response_mask.sum(-1) - 1]
    assert ends.tolist() == [im_end, im_end]


def test_plain_prompts_get_bos_as_tokenizer_text_does(checkpoints):
    tokenizer = load_tokenizer(checkpoints["mistral"])
    encoded = encode_prompts([{"prompt": "Hello there"}], tokenizer, False, 64)[0]
    assert encoded == tokenizer("Hello there")["input_ids"]
    assert encoded[0] == tokenizer.bos_token_id
    chat = encode_prompts([{"prompt": "Hello there"}], tokenizer, True, 64)[0]
    assert chat.count(tokenizer.bos_token_id) == 0  # ChatML writes no BOS; none is added on top


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _file_config(tmp_path, checkpoint, **data):
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}] * 6
    rows[2] = {"prompt": "What is 12 + 7? " * 20, "answer": "19"}  # line 3: far over 32 tokens
    path = _jsonl(tmp_path / "prompts.jsonl", rows)
    return _config(model={"path": checkpoint}, data={
        "task": "file", "path": str(path), "eval_size": 2, "max_prompt_tokens": 32, **data})


def test_over_long_prompts_are_named_at_load(checkpoints, tmp_path):
    config = _file_config(tmp_path, checkpoints["qwen2"])
    with pytest.raises(DatasetError) as err:
        build_run_context(config, str(tmp_path / "cache"))
    message = str(err.value)
    assert f"{tmp_path / 'prompts.jsonl'}:3 (" in message and "data.max_prompt_tokens=32" in message
    assert "1 train prompt(s)" in message and "data.long_prompts=drop" in message


def test_over_long_prompts_dropped_with_a_count(checkpoints, tmp_path, caplog):
    config = _file_config(tmp_path, checkpoints["qwen2"], long_prompts="drop")
    with caplog.at_level(logging.WARNING, logger="rlxf.data.prompt_lengths"):
        context = build_run_context(config, str(tmp_path / "cache"))
    assert len(context.task.train) == 3 and len(context.task.eval) == 2
    assert "dropped 1 of 4 train prompts" in caplog.text


def test_offline_by_default_one_message(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelNotLocalError, match="model.allow_download=true") as err:
        load_causal_lm("rlxf-tests/not-a-cached-model")
    assert "'rlxf-tests/not-a-cached-model'" in str(err.value)
    with pytest.raises(ModelNotLocalError, match="model.allow_download=true"):
        load_tokenizer("rlxf-tests/not-a-cached-model")
    assert _config().model.allow_download is False


def test_saved_tokenizer_files_stay_the_checkpoints(checkpoints, tmp_path, caplog):
    """GPT-2 style: no pad token. rlxf pads with EOS (says so), saves the original files untouched and
    its padding choice beside them."""
    with caplog.at_level(logging.WARNING, logger="rlxf.models.loading"):
        tokenizer = load_tokenizer(checkpoints["gpt2"])
    assert tokenizer.pad_token == "<|endoftext|>" and "has no pad_token" in caplog.text
    save_tokenizer(tokenizer, tmp_path / "policy")
    reloaded = transformers.AutoTokenizer.from_pretrained(tmp_path / "policy")
    assert reloaded.pad_token is None
    assert reloaded.padding_side == transformers.AutoTokenizer.from_pretrained(checkpoints["gpt2"]).padding_side
    padding = json.loads((tmp_path / "policy" / PADDING_FILE).read_text())
    assert padding == {"pad_token": "<|endoftext|>", "pad_token_id": tokenizer.eos_token_id, "padding_side": "left"}
    assert tokenizer.pad_token == "<|endoftext|>"  # the run's own tokenizer is unchanged


def test_reward_that_does_not_import_is_one_config_error(tiny_model_dir):
    config = _config(model={"path": tiny_model_dir}, reward={"function": "no_such_module_here:score"})
    with pytest.raises(ConfigError, match="reward.function 'no_such_module_here:score': cannot import"):
        build_run_context(config)


def test_reward_model_pairs_drop_the_end_of_turn_token(checkpoints):
    """The reward model reads the text the RL reward is given: the chat template rendered and decoded
    without its special tokens, then the response; no <|im_end|> after it, none anywhere."""
    from rlxf.loops.reward_model import reward_model_batch

    tokenizer = load_tokenizer(checkpoints["qwen2"])
    batch = reward_model_batch([{"prompt": "Hello", "chosen": "Hi", "rejected": "Go"}], tokenizer, True, 64)
    prompt = tokenizer.decode(encode_prompts([{"prompt": "Hello"}], tokenizer, True, 64)[0], skip_special_tokens=True)
    assert prompt.endswith("user\nHello\nassistant\n") and "<|im_start|>" not in prompt
    for row, text in enumerate(("Hi", "Go")):
        kept = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        assert kept == tokenizer(prompt + text, add_special_tokens=False)["input_ids"]
        assert not set(kept) & set(tokenizer.all_special_ids)


def test_a_chat_reward_model_scores_in_rl_what_it_was_trained_on(checkpoints, tmp_path):
    """Train-serve parity on a chat checkpoint: the scores of ``loop: reward_model``'s pair batch equal what
    ``reward.function: reward_model`` gives the same responses with the prompts a rollout decodes, prompts
    of different lengths (so padding differs between the two batches)."""
    from rlxf.batch import left_pad
    from rlxf.loops.reward_model import pair_scores, reward_model_batch
    from rlxf.models.reward_model import reward_model_from_lm
    from rlxf.rewards.registry import build_reward
    from rlxf.roles.rollout import RolloutRole

    path = checkpoints["qwen2"]
    tokenizer = load_tokenizer(path)
    torch.manual_seed(0)
    model = reward_model_from_lm(load_causal_lm(path)).eval()
    model.config.pad_token_id = tokenizer.pad_token_id
    rows = [{"prompt": "Hello there, how are you today?", "chosen": "Fine, thanks.", "rejected": "No"},
            {"prompt": "Hi", "chosen": "Hello! How can I help?", "rejected": "Bye bye bye"}]
    with torch.no_grad():
        chosen, rejected = pair_scores(model, reward_model_batch(rows, tokenizer, True, 64))
    model.save_pretrained(tmp_path / "rm")
    tokenizer.save_pretrained(tmp_path / "rm")
    rollout = RolloutRole(engine=None, tokenizer=tokenizer, chat_template=True, max_prompt_tokens=64)
    padded, _ = left_pad(rollout.encode([{"prompt": r["prompt"]} for r in rows]), tokenizer.pad_token_id,
                         torch.device("cpu"))  # a rollout batch's prompts, as decode_prompts reads them
    prompts = tokenizer.batch_decode(padded, skip_special_tokens=True)
    reward = build_reward("reward_model", {"path": str(tmp_path / "rm")})
    served = reward.score(prompts * 2, [r["chosen"] for r in rows] + [r["rejected"] for r in rows], [{}] * 4).scores
    assert chosen.abs().max() > 0 and len(set(served)) == 4
    assert torch.allclose(torch.tensor(served), torch.cat([chosen, rejected]), atol=1e-4)
