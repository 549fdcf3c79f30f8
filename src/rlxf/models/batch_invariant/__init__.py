"""A batch-invariant Llama-family forward: each token's logits are the same floats whatever else is
in the batch, however long the sequence is padded and whether it runs as a full causal pass (the
trainer) or one decode step over a KV cache (the rollout engine). ``ops.py`` holds the operations,
``llama.py`` the model built from them."""
