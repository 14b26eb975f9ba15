"""OpenEnv's ``EnvClient`` for an ``ecpo serve`` server: typed results, one WebSocket session per client.

    from ecpo_train.integrations.openenv.client import ECPOEnvClient

    with ECPOEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(seed=0)                      # or reset(task_id=...)
        result = env.step("go to the red door")         # a str or a TextAction
        result.observation.state_key, result.observation.action_key, result.reward, result.done

Each client is its own session on the server (its own environment), as OpenEnv's clients are.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from ecpo_train.integrations.openenv.models import EpisodeState, TextAction, TextObservation


class ECPOEnvClient(EnvClient[TextAction, TextObservation, EpisodeState]):
    """Client of one ``ecpo serve`` session; ``step`` takes a :class:`TextAction` or the text itself."""

    def _step_payload(self, action: TextAction | str) -> dict[str, Any]:
        if isinstance(action, str):
            return {"action": action}
        return {"action": action.action}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextObservation]:
        fields = dict(payload.get("observation") or {})
        fields.pop("metadata", None)
        observation = TextObservation(**fields, reward=payload.get("reward"), done=bool(payload.get("done", False)),
                                      metadata=payload.get("metadata") or {})
        return StepResult(observation=observation, reward=payload.get("reward"), done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> EpisodeState:
        return EpisodeState(**payload)


__all__ = ["ECPOEnvClient", "TextAction"]
