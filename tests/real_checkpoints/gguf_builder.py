"""A tiny Llama written as a GGUF file with the ``gguf`` package's own writer, as llama.cpp's converter lays
one out: the tensor names of llama.cpp, query/key rows permuted for its rotary layout, a GPT-2 style BPE
vocabulary with its merges, and a ChatML chat template. Also the same model as a plain transformers
``LlamaForCausalLM``, so a test can check that the GGUF path gives back exactly these weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.real_checkpoints.builders import CHATML, build_bpe_tokenizer

LAYER_TENSORS = {  # llama.cpp name -> transformers name, per block
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def tiny_llama(vocab: int, seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # weights large enough that logits differ between tokens
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn(p.shape) if "norm" in name else 0.1 * torch.randn(p.shape))
    return model


def _rotary_permuted(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp stores q/k rows interleaved per head pair (its rotary layout); transformers undoes this."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, weight.shape[1]).swapaxes(1, 2).reshape(weight.shape)


def write_tiny_gguf(path: Path, architecture: str = "llama", seed: int = 0) -> tuple[Path, LlamaForCausalLM, object]:
    """Writes the GGUF file; returns (path, the same model in transformers, its tokenizer)."""
    import gguf

    tokenizer = build_bpe_tokenizer(with_bos=False)
    tokenizer.add_special_tokens({"pad_token": "<|im_end|>"})
    model = tiny_llama(len(tokenizer), seed)
    c = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_vocab_size(c.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    backend = tokenizer.backend_tokenizer
    vocab = backend.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    specials = set(tokenizer.all_special_tokens) | {"<|im_start|>", "<|im_end|>"}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t in tokens])
    import json
    merges = json.loads(backend.to_str())["model"]["merges"]
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(vocab["<|im_start|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_pad_token_id(vocab["<|im_end|>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)

    state = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    for layer in range(c.num_hidden_layers):
        for gguf_name, hf_name in LAYER_TENSORS.items():
            weight = state[f"model.layers.{layer}.{hf_name}.weight"]
            if gguf_name == "attn_q":
                weight = _rotary_permuted(weight, c.num_attention_heads)
            elif gguf_name == "attn_k":
                weight = _rotary_permuted(weight, c.num_key_value_heads)
            writer.add_tensor(f"blk.{layer}.{gguf_name}.weight", weight)
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, model, tokenizer


def response_length(prompts, responses, metadata):
    """A reward that differs between a group's samples from the first step (the tiny GGUF never answers)."""
    return [float(len(r)) for r in responses]
