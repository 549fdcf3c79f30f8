"""Fuzzing the reward server's request schema (hypothesis, a bounded number of examples): any JSON body
gets a 200 with one score per response exactly when it is a valid request, else a 400 with an error,
never a 500 or a dropped connection."""

import pytest

from rlxf.rewards.base import as_reward
from rlxf.rewards.server import ServerSettings, start_reward_server

httpx = pytest.importorskip("httpx")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

json_leaf = st.none() | st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
texts = st.lists(st.text(max_size=8), max_size=4)
field_values = texts | json_value
metadata_values = st.none() | st.lists(st.dictionaries(st.text(max_size=4), json_value, max_size=2), max_size=4) | json_value
bodies = st.fixed_dictionaries({}, optional={"prompts": field_values, "responses": field_values,
                                             "metadata": metadata_values, "extra": json_value}) | json_value


def is_valid(body) -> bool:
    if not isinstance(body, dict) or not {"prompts", "responses"} <= set(body):
        return False
    prompts, responses, metadata = body["prompts"], body["responses"], body.get("metadata")
    if not all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in (prompts, responses)):
        return False
    if len(prompts) != len(responses):
        return False
    return metadata is None or (isinstance(metadata, list) and len(metadata) == len(responses)
                                and all(isinstance(m, dict) for m in metadata))


@pytest.fixture(scope="module")
def server_url():
    reward = as_reward(lambda prompts, responses, metadata: [float(len(r)) for r in responses])
    server = start_reward_server(reward, "length", settings=ServerSettings(max_batch=8))
    yield server.url
    server.stop()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
@example(body={"prompts": ["a", "b"], "responses": ["bb", ""], "metadata": [{}, {"k": [1]}]})
@example(body={"prompts": ["a"], "responses": ["bb", "c"]})
@example(body=[1, 2])
def test_any_json_body_gets_a_score_or_a_clear_400(server_url, body):
    reply = httpx.post(f"{server_url}/score", json=body, timeout=10)
    if is_valid(body):
        assert reply.status_code == 200, reply.text
        assert reply.json()["scores"] == [float(len(r)) for r in body["responses"]]
    else:
        assert reply.status_code == 400, (body, reply.text)
        assert reply.json()["error"].startswith("bad request: ")
