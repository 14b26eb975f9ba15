"""``ECPO.training_step`` for an LLM: ``core.iteration.run_iteration`` (the native trainer's iteration, written
once) with RLlib's actors doing the work.

    sampler   ``sampler.RunnerPoolSampler``: the driver draws the groups' tasks and env seed (the native
              trainer's generator and order) and the healthy ``LLMEnvRunner`` actors play them in whole groups
              (topped up when a runner is lost, pipelined with ``max_policy_lag=1``)
    learner   ``LearnerGroupLearner``: the ``LearnerGroup``'s update on whole groups per learner: credit in the
              learners' connector (``StepTableCredit``), then ``ECPOLLMLearner.update`` (``core.loss.policy_update``)

then RLlib's own result keys (``results.log_iteration``) beside the native metrics.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import ray

from ecpo_train.core.iteration import Learned, UpdatePlan, run_iteration
from ecpo_train.integrations.rllib.llm.connector import CREDIT_RESULTS, CREDIT_SECONDS
from ecpo_train.integrations.rllib.llm.learner import NONZERO_ADVANTAGES, UPDATE_RESULTS
from ecpo_train.integrations.rllib.llm.results import log_iteration
from ecpo_train.integrations.rllib.llm.sampler import RunnerPoolSampler


class LearnerGroupLearner:
    """Steps B-E of one iteration on a ``LearnerGroup`` of ``num_learners`` learner actors (0: one in the driver),
    on the rows and in the order of the iteration's ``UpdatePlan``. ``results``: the learners' results, once
    updated."""

    def __init__(self, learner_group: Any, num_learners: int) -> None:
        self.learner_group, self.num_learners = learner_group, int(num_learners)
        self.shards = max(1, self.num_learners)
        self.results: list[Any] = []

    def learn(self, plan: UpdatePlan, rng: np.random.Generator) -> Learned:
        learner_group, shuffle = self.learner_group, plan.shuffle
        started = time.perf_counter()
        per_group = [g for table in plan.tables for g in table.by_group()]  # a group never straddles learners
        if learner_group.is_local:
            self.results = learner_group.update(episodes=per_group, shuffle=shuffle)
        else:
            if len(per_group) < self.num_learners:
                raise ValueError(f"{len(per_group)} groups cannot feed {self.num_learners} learners")
            self.results = learner_group.update(episodes_refs=[ray.put(g) for g in per_group], shuffle=shuffle)
        credit, update = learner_metrics(self.results)
        seconds = max((_learner_value(result, CREDIT_SECONDS) for result in self.results), default=0.0)
        return Learned(credit, update, {"credit": seconds, "update": time.perf_counter() - started - seconds},
                       int(sum(_learner_value(result, CREDIT_RESULTS, NONZERO_ADVANTAGES) for result in self.results)))


def llm_training_step(algo: Any) -> dict[str, float]:
    """One native-trainer iteration through RLlib (see the module docstring); returns the native metrics. The
    sampler and the learner get the parts of ``algo`` they use (its runner pool and the run's state; its learner
    group), not the algorithm."""
    state = algo.ecpo
    sampler = RunnerPoolSampler(algo.runner_pool(), state)
    learner = LearnerGroupLearner(algo.learner_group, int(algo.config.num_learners))
    metrics = run_iteration(state.train_config, state.iteration, state.rng, state.train_tasks,
                            sampler, learner, algo.validate, observe=state.observe, memory=state.memory)
    state.iteration += 1  # the learner's updates: the version of its weights
    sampled = sampler.sampled
    seconds = {phase: metrics[f"time/{phase}"] for phase in ("sampling", "sampling_wait", "update", "sync")
               if f"time/{phase}" in metrics}
    log_iteration(algo.metrics, sampled.played, sampled.num_rows, learner.results, seconds, sampled.report)
    return metrics


def _learner_value(result: Any, *path: str) -> float:
    """A learner result's value at ``path`` under the module (0 where absent)."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    value = result.get(DEFAULT_MODULE_ID, {})
    for key in path:
        value = value.get(key, 0.0) if isinstance(value, dict) else 0.0
    return float(value.peek() if hasattr(value, "peek") else value)


def learner_metrics(results: list[Any]) -> tuple[dict[str, float], dict[str, float]]:
    """The learners' credit diagnostics and update statistics (their results' ``credit`` and ``update`` keys) as two
    dicts of floats under their own names (``iteration_metrics`` names them ``credit/...``, ``update/...``). Each
    learner computes credit on its own groups, so the diagnostics are combined over the learners' results as the
    native trainer combines its processes': counts (``num_...``) summed, the rest averaged. The update statistics
    are already reduced over the learners' process group, so every learner's are the same: the first's are read."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    modules = [result.get(DEFAULT_MODULE_ID, {}) for result in results]

    def floats(module: Any, part: str) -> dict[str, float]:  # each a Stats object, or its value
        return {name: float(v.peek() if hasattr(v, "peek") else v) for name, v in module.get(part, {}).items()}

    credit = [floats(module, CREDIT_RESULTS) for module in modules]
    combined = {name: (sum if name.startswith("num_") else statistics.fmean)([c[name] for c in credit if name in c])
                for name in dict.fromkeys(name for c in credit for name in c)}
    return combined, floats(modules[0], UPDATE_RESULTS) if modules else {}
