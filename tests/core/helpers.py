"""Importable helpers for tests (reward functions named by dotted path)."""


def length_reward(prompts, responses, metadata):
    return [float(len(r)) for r in responses]
