"""The learned reward model scorer on a locally built sequence-classification checkpoint."""

import pytest
import torch
from transformers import LlamaForSequenceClassification

from rlxf.models.char_tokenizer import build_char_tokenizer
from rlxf.models.tiny import tiny_llama_config
from rlxf.rewards.registry import build_reward


def test_sequence_classifier_scores_batched_like_one_by_one(tmp_path):
    tokenizer = build_char_tokenizer()
    config = tiny_llama_config(len(tokenizer), hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    config.num_labels = 1
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    reward = build_reward("reward_model", {"path": str(tmp_path), "batch_size": 3, "scale": 2.0, "offset": 1.0})
    prompts, responses = ["1+1=", "2+2=", "3+3=", "10+10="], ["2", "4444", "6", "20"]
    batched = reward.score(prompts, responses, [{}] * 4)
    single = [reward.score([p], [r], [{}]).scores[0] for p, r in zip(prompts, responses)]
    assert batched.scores == pytest.approx(single, abs=1e-4)
    assert len(set(round(s, 4) for s in batched.scores)) > 1  # the text matters
    assert batched.components["reward_model"] == batched.scores
