"""Expert play: the stored walkthrough of a real game or the constructive plan of a generated one."""

from __future__ import annotations

from typing import Any


def expert_plan(env: Any) -> list[str]:
    """Commands that win the game ``env`` was last reset to (gymnasium wrappers are looked through)."""
    base = getattr(env, "unwrapped", env)
    if not hasattr(base, "expert_plan"):
        raise TypeError(f"{type(base).__name__} has no expert plan (expected an ecpo ALFWorld environment)")
    return base.expert_plan()


class ExpertAgent:
    """Follows the expert plan of the current episode: ``act(obs, info)`` returns the next command.

    Call ``start(env)`` after each ``reset``. Beyond the plan's end it answers ``look`` (a no-op).
    """

    def __init__(self) -> None:
        self.plan: list[str] = []

    def start(self, env: Any) -> None:
        self.plan = expert_plan(env)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        step = int(info.get("step", 0))
        return self.plan[step] if step < len(self.plan) else "look"


def play_expert(env: Any, task_id: str, seed: int | None = None) -> dict[str, Any]:
    """Reset ``env`` to ``task_id`` and play its expert plan; returns outcome, steps, rewards, state keys."""
    _, info = env.reset(seed=seed, options={"task_id": task_id})
    game_state = getattr(getattr(env, "unwrapped", env), "game_state", None)
    won_at_reset = bool(game_state["won"]) if game_state is not None else False
    agent = ExpertAgent()
    agent.start(env)
    rewards, keys, actions_valid = [], [info["state_key"]], []
    terminated = truncated = False
    won = False
    obs = ""
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
        rewards.append(reward)
        keys.append(info["state_key"])
        actions_valid.append(info["is_action_valid"])
        won = won or info["won"]
        if info["step"] >= len(agent.plan) and not (terminated or truncated):
            break
    return {"task_id": info["task_id"], "task_type": info["task_type"], "won": won, "steps": info["step"],
            "plan_length": len(agent.plan), "rewards": rewards, "state_keys": keys,
            "all_valid": all(actions_valid), "terminated": terminated, "won_at_reset": won_at_reset}


def play_expert_many(env_id: str, task_ids: list[str], env_kwargs: dict[str, Any] | None = None,
                     seed: int | None = 0) -> list[dict[str, Any]]:
    """Play the expert on each task with one environment (a picklable entry point for process pools)."""
    import ecpo_gym  # noqa: F401  (registers the ids in a fresh process)
    from ecpo_gym.group_workers import make_env

    env = make_env(env_id, env_kwargs)
    try:
        return [play_expert(env, task_id, seed=seed) for task_id in task_ids]
    finally:
        env.close()


def play_expert_parallel(env_id: str, task_ids: list[str], env_kwargs: dict[str, Any] | None = None,
                         processes: int = 2, seed: int | None = 0) -> list[dict[str, Any]]:
    """``play_expert_many`` sharded over ``processes`` spawned processes (the engine is not thread-safe)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    shards = [task_ids[k::processes] for k in range(processes)]
    with ProcessPoolExecutor(processes, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(play_expert_many, env_id, shard, env_kwargs, seed) for shard in shards if shard]
        results = [r for f in futures for r in f.result()]
    order = {t: k for k, t in enumerate(task_ids)}
    return sorted(results, key=lambda r: order[r["task_id"]])
