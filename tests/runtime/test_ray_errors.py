"""An rlxf error raised inside a Ray actor reaches the driver as itself (one-line message, the actor's traceback
as its cause), as it does in one process; other errors stay as Ray raises them."""

from __future__ import annotations

import pytest

from rlxf.errors import RemoteTraceback
from rlxf.rewards.guarded import RewardError


class FailingRole:
    def score(self, kind: str):
        if kind == "reward":
            raise RewardError("reward 'r' raised KeyError: 'answer'")
        return 1 / 0


def test_an_actors_rlxf_error_arrives_as_itself(ray_cluster):
    from rlxf.runtime.proxy import RoleProxy
    from rlxf.runtime.worker import RoleWorker

    actor = ray_cluster.remote(RoleWorker).options(num_cpus=0.25).remote((FailingRole, (), {}), 1)
    proxy = RoleProxy("reward", actor, restartable=False)
    try:
        with pytest.raises(RewardError) as caught:
            proxy.score("reward")
        assert type(caught.value) is RewardError  # not Ray's RayTaskError(RewardError)
        assert str(caught.value) == "reward 'r' raised KeyError: 'answer'"
        assert isinstance(caught.value.__cause__, RemoteTraceback)
        assert "FailingRole" not in str(caught.value) and "in score" in str(caught.value.__cause__)
        with pytest.raises(ZeroDivisionError):  # a bug: Ray's error, with the actor's traceback in its message
            proxy.score("bug")
    finally:
        ray_cluster.kill(actor)
