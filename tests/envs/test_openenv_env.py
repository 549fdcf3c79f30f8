"""``env: openenv``: an OpenEnv environment package (tests/envs/openenv_packages, written only against
``openenv-core``) served by rlxf on loopback, driven through its typed client in the multi-turn rollout over
the tiny model. The rewards rlxf records are the environment's own scoring of the very messages, the tokens
trained are the tokens sampled, and a server that dies is restarted, one that cannot start named."""

import sys
from pathlib import Path

import pytest
import torch

from rlxf.config import EnvConfig
from rlxf.rollout.sampling import SamplingParams

pytest.importorskip("openenv.core", reason="openenv-core is not installed (pip install 'rlxf[openenv]')")
PACKAGES = str(Path(__file__).parents[2] / "examples" / "environments" / "openenv")
EOS = 2
GUESS = {"app": "rlxf_oe_guess.server:app", "client": "openenv.core:GenericEnvClient",
         "action": "rlxf_oe_guess.models:GuessAction", "observation_field": "text", "reset_keys": ["seed"]}


@pytest.fixture(scope="module")
def packages():
    """The packages importable as installed ones are; one server for the module (it takes seconds to start)."""
    from rlxf.envs.openenv_server import stop_servers

    sys.path.insert(0, PACKAGES)
    yield
    stop_servers()  # what the end of a run does
    sys.path.remove(PACKAGES)


@pytest.fixture
def make_role(tiny_model, tokenizer):
    from rlxf.roles.agent_rollout import AgentRolloutRole
    from rlxf.rollout.torch_engine import TorchRolloutEngine

    roles = []

    def make(**kwargs):
        engine = TorchRolloutEngine(tiny_model, EOS, tokenizer.pad_token_id)
        cfg = EnvConfig(name="openenv", kwargs={**GUESS, **kwargs}, max_turns=4, max_total_tokens=160)
        roles.append(AgentRolloutRole(engine, tokenizer, False, 64, cfg))
        return roles[-1]

    yield make
    for role in roles:
        role.close()


def test_rewards_are_the_environments_scoring_of_the_sampled_tokens(packages, make_role, tiny_model, tokenizer):
    from rlxf_oe_guess.server import score

    from rlxf.envs.openenv_server import SERVERS

    role = make_role()
    rows = [{"prompt": "", "seed": 3}, {"prompt": "", "seed": 7}]
    batch = role.generate(rows, SamplingParams(n=2, max_new_tokens=6), torch.Generator().manual_seed(0))
    assert batch.group_ids.tolist() == [0, 0, 1, 1]
    for row in range(4):
        meta, digit = batch.metadata[row], rows[row // 2]["seed"]
        prompt = batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist()
        assert tokenizer.decode(prompt) == f"Reply with the digit {digit} and nothing else."  # the reset observation is the first message
        assert meta["turns"] == 2 and meta["stopped"] is True  # done after two steps, said the environment
        n = int(batch.response_mask[row].sum())
        response, mask = batch.response_ids[row, :n].tolist(), batch.loss_mask[row, :n].tolist()
        texts = [tokenizer.decode(response[s:e], skip_special_tokens=True) for s, e in meta["turn_spans"]]
        assert meta["turn_rewards"] == [score(t, digit) for t in texts]  # the environment's own scoring
        assert meta["env_components"]["openenv_reward"] == sum(meta["turn_rewards"]) == meta["env_reward"]
        assert meta["env_components"]["openenv_done"] == 1.0
        (_, e0), (s1, _) = meta["turn_spans"]
        assert mask[e0:s1] == [0] * (s1 - e0) and tokenizer.decode(response[e0:s1]) == f"Again: reply with the digit {digit} only."
        full = torch.tensor(prompt + response)[None]
        with torch.no_grad():
            logits = tiny_model(full).logits[0, len(prompt) - 1: -1].float().log_softmax(-1)
        recomputed = logits.gather(-1, full[0, len(prompt):, None]).squeeze(-1)
        keep = batch.loss_mask[row, :n].bool()
        assert torch.allclose(recomputed[keep], batch.rollout_log_probs[row, :n][keep], atol=1e-4)
    # a server that died between steps is started again, and the episodes go on
    server = SERVERS[(GUESS["app"], "127.0.0.1")]
    starts = server.starts
    server.proc.kill()
    server.proc.wait()
    batch = role.generate(rows[:1], SamplingParams(n=1, max_new_tokens=4), torch.Generator().manual_seed(1))
    assert batch.metadata[0]["turns"] == 2 and server.starts == starts + 1


def test_a_server_that_hangs_is_retried_then_named_in_one_line(packages, tokenizer):
    from rlxf.envs.openenv_server import OpenEnvServerError
    from rlxf.roles.agent_rollout import AgentRolloutRole
    from tests.serving.test_openai_endpoint import ScriptedEngine

    engine = ScriptedEngine(tokenizer, ["(hang)"])
    cfg = EnvConfig(name="openenv", kwargs={**GUESS, "step_timeout_s": 1.0, "retries": 1}, max_turns=4,
                    max_total_tokens=160)
    role = AgentRolloutRole(engine, tokenizer, False, 64, cfg)
    try:
        with pytest.raises(OpenEnvServerError) as err:
            role.generate([{"prompt": "", "seed": 3}], SamplingParams(n=1, max_new_tokens=12))
    finally:
        role.close()
    message = str(err.value)
    assert GUESS["app"] in message and "no answer to step within step_timeout_s=1.0 (2 tries)" in message
    assert "\n" not in message


def test_a_server_that_cannot_start_is_named_in_one_line(packages, make_role):
    from rlxf.envs.openenv_server import OpenEnvServerError

    role = make_role(app="rlxf_oe_guess.broken_server:app")
    with pytest.raises(OpenEnvServerError) as err:
        role.generate([{"prompt": "", "seed": 1}], SamplingParams(n=1, max_new_tokens=4))
    message = str(err.value)
    assert "rlxf_oe_guess.broken_server:app" in message and "this server cannot start" in message
    assert "\n" not in message


def test_missing_package_is_one_line_with_the_install_command(monkeypatch):
    from rlxf.envs.base import env_factory
    from rlxf.errors import MissingPackageError

    monkeypatch.setitem(sys.modules, "openenv", None)
    monkeypatch.setitem(sys.modules, "openenv.core", None)
    with pytest.raises(MissingPackageError, match=r"pip install 'rlxf\[openenv\]'"):
        env_factory("openenv", {"url": "http://127.0.0.1:1"})()


def test_a_tool_call_becomes_the_typed_action(packages, tokenizer):
    """``action_format: tool``: the action type is offered as a function; the call the policy writes (plain
    chat format: ``@GuessAction(3)``) is parsed by the endpoint, its arguments become a ``GuessAction``."""
    from rlxf.roles.agent_rollout import AgentRolloutRole
    from tests.serving.test_openai_endpoint import ScriptedEngine

    engine = ScriptedEngine(tokenizer, ["@GuessAction(3)", "@GuessAction(4)"])
    cfg = EnvConfig(name="openenv", kwargs={**GUESS, "action_format": "tool", "format_kwargs": {"tools_header": ""}},
                    max_turns=4, max_total_tokens=64)
    role = AgentRolloutRole(engine, tokenizer, False, 64, cfg)
    try:
        batch = role.generate([{"prompt": "", "seed": 3}], SamplingParams(n=1, max_new_tokens=20))
    finally:
        role.close()
    meta = batch.metadata[0]
    assert "agent_failure" not in meta and meta["turns"] == 2
    assert meta["turn_rewards"] == [1.0, 0.0]  # GuessAction(message="3") scored 1 by the environment, "4" 0


def test_run_whose_server_cannot_start_stops_in_one_line(packages, tmp_path, tiny_model_dir, capsys):
    from rlxf.cli import main

    recipe = Path(__file__).parents[2] / "recipes" / "openenv_guess.yaml"
    code = main(["train", str(recipe), f"model.path={tiny_model_dir}", f"run_dir={tmp_path / 'run'}",
                 f"env.kwargs.package_dir={PACKAGES}", "env.kwargs.app=rlxf_oe_guess.broken_server:app",
                 "data.eval_size=4", "train.steps=1", "logging.plot=false", "logging.progress_bar=false"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rlxf: ")]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert "OpenEnv server 'rlxf_oe_guess.broken_server:app' exited with status" in lines[0]
    assert "this server cannot start" in lines[0]
