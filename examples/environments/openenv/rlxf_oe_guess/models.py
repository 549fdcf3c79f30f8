from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class GuessAction(Action):
    message: str = Field(..., description="the policy's text")


class GuessObservation(Observation):
    text: str = Field(default="", description="what the environment says")
