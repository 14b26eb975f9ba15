"""Each environment family's privileged player: what the expert sends at each step of one episode.

``episode_expert(env, task_id)`` is called after a reset and returns a callable ``step -> action or None``
(``None`` past the end of the expert's plan). The rule of which expert an environment has lives here once:

- ALFWorld (native engine, TextWorld, generated households) and the diagnostic corridors: the environment's
  ``expert_plan`` (walkthrough, generator plan, the good doors);
- WebShop: the actions that buy the goal's target product;
- search-QA: the gold-evidence oracle (search the question and the supporting titles, then answer).

An environment with none of these is a ``TypeError`` naming it. The leaderboard's ``ExpertAgent`` and the
warm start's demonstrations (``ecpo sft``) both play through this function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def episode_expert(env: Any, task_id: str) -> Callable[[int], str | None]:
    """The expert's action at step ``k`` of the episode ``env`` was just reset to (``task_id``)."""
    base = getattr(env, "unwrapped", env)
    if hasattr(base, "expert_plan"):
        from ecpo_gym.alfworld.expert import expert_plan

        return _plan(expert_plan(base))
    if hasattr(base, "goal_of") and hasattr(base, "shop"):
        from ecpo_gym.webshop.expert import expert_actions_for_task

        return _plan(expert_actions_for_task(base, str(task_id)))
    from ecpo_gym.searchqa.expert import GoldEvidenceOracle

    oracle = GoldEvidenceOracle(base)  # raises TypeError naming the env when it has no expert
    return lambda step: oracle.act()


def _plan(actions: list[str]) -> Callable[[int], str | None]:
    return lambda step: actions[step] if step < len(actions) else None
