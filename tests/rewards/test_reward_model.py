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


def test_scale_offset_template_and_label_are_applied(tmp_path):
    """score = scale * logit[label] + offset, the logit of ``template`` filled with prompt and response
    (checked against the classifier run by hand on that text)."""
    tokenizer = build_char_tokenizer()
    config = tiny_llama_config(len(tokenizer), hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    config.num_labels = 2
    torch.manual_seed(1)
    model = LlamaForSequenceClassification(config)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    prompts, responses = ["1+1=", "7+5="], ["2", "13"]

    def logits(text: str) -> torch.Tensor:
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            return model(**ids).logits[0]

    kwargs = {"path": str(tmp_path), "template": "Q: {prompt} A: {response}", "label": 1, "scale": -3.0,
              "offset": 0.5}
    scores = build_reward("reward_model", kwargs).score(prompts, responses, [{}, {}]).scores
    texts = [f"Q: {p} A: {r}" for p, r in zip(prompts, responses)]
    assert scores == pytest.approx([-3.0 * float(logits(t)[1]) + 0.5 for t in texts], abs=1e-5)
    plain = build_reward("reward_model", {"path": str(tmp_path)}).score(prompts, responses, [{}, {}]).scores
    assert plain == pytest.approx([float(logits(p + r)[0]) for p, r in zip(prompts, responses)], abs=1e-5)
    assert all(abs(s - p) > 1e-3 for s, p in zip(scores, plain))
