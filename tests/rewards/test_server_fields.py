"""A client's missing or malformed per-sample field is its own mistake (400 naming the field and the sample),
on a real uvicorn server on 127.0.0.1; a reward that fails on well-formed input stays a 500."""

import pytest

from rlxf.rewards.base import as_reward
from rlxf.rewards.registry import build_reward
from rlxf.rewards.server import start_reward_server

httpx = pytest.importorskip("httpx")


@pytest.fixture
def serve():
    servers = []

    def start(reward, name):
        servers.append(start_reward_server(reward, name))
        return servers[-1].url

    yield start
    for server in servers:
        server.stop()


def label_reward(prompts, responses, metadata):  # declares nothing: reads a field the client may not send
    return [float(r == m["label"]) for r, m in zip(responses, metadata)]


def dividing_reward(prompts, responses, metadata):
    return [1.0 / (len(r) - 1) for r in responses]  # fails on the well-formed response "x"


def test_the_arithmetic_reward_without_metadata_is_the_clients_400(serve):
    url = serve(build_reward("arithmetic"), "arithmetic")
    reply = httpx.post(f"{url}/score", json={"prompts": ["1+1="], "responses": ["2"]})
    assert reply.status_code == 400
    assert reply.json() == {"error": "sample 0: metadata has no field 'answer', which reward 'arithmetic' needs"}


def test_a_declared_field_that_does_not_parse_names_the_sample(serve):
    url = serve(build_reward("arithmetic"), "arithmetic")
    rows = [{"answer": "2"}, {"answer": 4}, {"answer": "four"}]
    reply = httpx.post(f"{url}/score", json={"prompts": ["1+1=", "2+2=", "2+2="], "responses": ["2", "4", "4"],
                                             "metadata": rows})
    assert reply.status_code == 400
    assert reply.json()["error"] == ("sample 2: metadata field 'answer' is malformed ('four': invalid literal for "
                                     "int() with base 10: 'four'), which reward 'arithmetic' needs")
    rows[2] = {"answer": "4"}  # well-formed: scored (correct 1 + format 0.1 each)
    reply = httpx.post(f"{url}/score", json={"prompts": ["1+1=", "2+2=", "2+2="], "responses": ["2", "4", "5"],
                                             "metadata": rows})
    assert reply.status_code == 200 and reply.json()["scores"] == [1.1, 1.1, 0.1]


def test_a_field_an_undeclared_reward_reads_is_a_400_naming_the_sample(serve):
    url = serve(as_reward(label_reward), "label")
    reply = httpx.post(f"{url}/score", json={"prompts": ["p", "p"], "responses": ["a", "b"],
                                             "metadata": [{"label": "a"}, {"lable": "b"}]})
    assert reply.status_code == 400
    assert reply.json() == {"error": "sample 1: metadata has no field 'label', which reward 'label' reads"}
    reply = httpx.post(f"{url}/score", json={"prompts": ["p", "p"], "responses": ["a", "b"],
                                             "metadata": [{"label": "a"}, {"label": "a"}]})
    assert reply.status_code == 200 and reply.json()["scores"] == [1.0, 0.0]


def test_a_reward_that_fails_on_well_formed_input_stays_a_500(serve):
    url = serve(as_reward(dividing_reward), "dividing")
    reply = httpx.post(f"{url}/score", json={"prompts": ["p", "p"], "responses": ["xyz", "x"]})
    assert reply.status_code == 500
    assert reply.json() == {"error": "reward 'dividing' raised ZeroDivisionError: float division by zero"}
    assert httpx.post(f"{url}/score", json={"prompts": ["p"], "responses": ["xyz"]}).json()["scores"] == [0.5]
