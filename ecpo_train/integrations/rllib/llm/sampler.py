"""The LLM algorithm's sampler: step A on the env-runner pool, for ``core.iteration.run_iteration``.

``max_policy_lag=0`` (lock-step): the iteration's groups are drawn, assigned in whole groups to the healthy
``LLMEnvRunner`` actors (``groups.sample_groups``, a lost runner's groups topped up or refused), and the runners
get the learner's new weights after the update. ``max_policy_lag=1``: the groups the runners played during the
previous update are taken, and the next iteration's dispatched before this update (``pipeline.take_and_dispatch``,
which syncs the weights there). Each row carries the version of the weights that played it: the report says the
policy lag.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ecpo_train.core.iteration import Draw, Sampled
from ecpo_train.core.rollout import episode_metrics
from ecpo_train.integrations.rllib.llm.groups import RunnerPool, sample_groups
from ecpo_train.integrations.rllib.llm.pipeline import sync_runner_weights, take_and_dispatch
from ecpo_train.integrations.rllib.llm.run_state import ECPOState


class RunnerPoolSampler:
    """Step A of one iteration on the env runners of ``pool`` (``groups.RunnerPool``) for the run ``state``
    (``run_state.ECPOState``: the learner's version, the groups dispatched): see the module docstring.
    ``sampled`` holds the iteration's samples once played (``played``: the episodes' outcomes, in trajectory
    order)."""

    def __init__(self, pool: RunnerPool, state: ECPOState) -> None:
        self.pool, self.state = pool, state
        self.sampled: Sampled | None = None
        self._synced_seconds: float | None = None  # pipelined: the weights were synced before the dispatch

    def sample(self, draw: Draw, iteration: int) -> Sampled:
        pool = self.pool
        started = time.perf_counter()
        if int(pool.config.max_policy_lag) == 0:
            outs, report = sample_groups(pool, *draw(iteration))
            lags = int(self.state.iteration) - np.concatenate([o["batch"].policy_version for o in outs])
            report |= {"policy_lag_mean": float(np.mean(lags)), "policy_lag_max": float(np.max(lags)),
                       "num_stale_groups_resampled": 0.0}
            seconds = {"sampling": time.perf_counter() - started}
        else:
            outs, report, pipelined = take_and_dispatch(pool, self.state, draw, iteration)
            # sampling: the runners' busy seconds (they played during the previous update); sampling_wait: the
            # driver's
            seconds = {"sampling": runner_busy_seconds(outs), "sampling_wait": pipelined["sampling_wait"]}
            self._synced_seconds = pipelined["sync"]
        episodes = sorted((e for o in outs for e in o["episodes"]), key=lambda e: e.traj_id)
        self.sampled = Sampled([o["batch"] for o in outs], episode_metrics(episodes),
                               {"generation": max(o["generation_seconds"] for o in outs),
                                "env": max(o["env_seconds"] for o in outs)} | seconds,
                               report, played=episodes)
        return self.sampled

    def sync(self) -> dict[str, float]:
        """Lock-step: the runners get the new weights now; pipelined, they got them before the dispatch."""
        if self._synced_seconds is not None:
            return {"sync": self._synced_seconds}
        started = time.perf_counter()
        sync_runner_weights(self.pool)
        return {"sync": time.perf_counter() - started}

    def combined(self, metrics: dict[str, float]) -> dict[str, float]:
        return metrics  # the driver sampled every group


def runner_busy_seconds(outs: list[dict[str, Any]]) -> float:
    """The longest time one runner spent playing its share of the groups (its calls' seconds, summed)."""
    busy: dict[int, float] = {}
    for out in outs:
        busy[out["runner"]] = busy.get(out["runner"], 0.0) + float(out["seconds"])
    return max(busy.values())
