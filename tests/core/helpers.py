"""Importable helpers for tests (reward functions named by dotted path)."""


def length_reward(prompts, responses, metadata):
    return [float(len(r)) for r in responses]


CALLS = {"n": 0}  # calls of fails_on_the_third_call; a test resets it before its run


def fails_on_the_third_call(prompts, responses, metadata):
    """A reward that works, then raises at its 3rd call: the initial eval, step 1, then step 2 fails."""
    CALLS["n"] += 1
    if CALLS["n"] == 3:
        raise ValueError("reward server went away")
    return [float(len(r)) for r in responses]


def slow_length_reward(prompts, responses, metadata):
    """length_reward after a second's wait: a step that is surely still in progress when a test signals it."""
    import time

    time.sleep(1.0)
    return length_reward(prompts, responses, metadata)
