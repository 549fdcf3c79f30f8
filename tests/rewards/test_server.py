"""``rlxf serve-reward``'s server and the ``remote`` client reward, on 127.0.0.1."""

import pytest

from rlxf.rewards.registry import build_reward
from rlxf.rewards.remote import RemoteReward, RemoteRewardError
from rlxf.rewards.server import start_reward_server
from rlxf.roles.reward import RewardError, RewardRole


@pytest.fixture
def serve():
    servers = []

    def start(reward, name="r"):
        servers.append(start_reward_server(reward, name))
        return servers[-1].url

    yield start
    for server in servers:
        server.stop()


def test_round_trip_matches_local_scores(serve):
    local = build_reward("arithmetic")
    url = serve(local, "arithmetic")
    remote = build_reward("remote", {"url": url, "timeout_seconds": 10})
    args = (["1+1=", "2+2="], ["2", "5"], [{"answer": "2", "stopped": True}, {"answer": "4", "stopped": False}])
    expected, got = local.score(*args), remote.score(*args)
    assert got.scores == expected.scores == [1.1, 0.0]
    assert got.components == expected.components


def test_server_error_is_named_by_the_reward_role(serve):
    def broken(p, r, m):
        raise KeyError("answer")

    url = serve(_as_reward(broken), "broken")
    role = RewardRole(RemoteReward(url, timeout_seconds=10), "remote")
    with pytest.raises(RewardError, match=r"reward 'remote' raised RemoteRewardError: .*500.*KeyError"):
        role.score(["p"], ["r"], [{}])


def test_unreachable_server():
    with pytest.raises(RemoteRewardError, match="unreachable"):
        RemoteReward("http://127.0.0.1:9", timeout_seconds=2).score(["p"], ["r"], [{}])


def _as_reward(fn):
    from rlxf.rewards.base import as_reward

    return as_reward(fn)
