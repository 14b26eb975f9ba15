"""The LLM iteration's results under RLlib's own names (``ray.rllib.utils.metrics``), mapped here and only here.

``result["ecpo"]`` keeps the native trainer's names (``success``, ``credit/...``, ``update/...``, ``time/...``);
an RLlib user's script, a Tune stopper or a dashboard reads RLlib's:

- ``result["env_runners"]``: ``episode_return_mean|min|max``, ``episode_len_mean|min|max``, ``num_episodes``,
  ``num_env_steps_sampled`` over this iteration's episodes, and the ``..._lifetime`` counts;
- ``result["learners"][module_id]``: ``policy_loss``, ``entropy`` (when the update measures it:
  ``entropy_coeff > 0``), ``mean_kl_loss`` and ``curr_kl_coeff`` (with ``use_kl_loss``),
  ``gradients_default_optimizer_global_norm``, ``default_optimizer_learning_rate`` (RLlib's learner logs it),
  ``num_module_steps_trained``; ``result["learners"]["__all_modules__"]``: ``num_env_steps_trained`` and its
  lifetime count;
- ``result["num_env_steps_sampled_lifetime"]``, ``result["num_env_steps_trained_lifetime"]``;
- ``result["timers"]``: ``env_runner_sampling_timer``, ``learner_update_timer``, ``synch_weights`` (seconds;
  with ``max_policy_lag=1`` the sampling timer is the runners' busy time, spent during the previous update);
- ``result["env_runners"]``: ``policy_lag_mean``, ``policy_lag_max`` (the learner's version minus the version that
  sampled each row of the batch) and ``num_stale_groups_resampled`` (groups refused as older than the bound).

One env step is one step-row: one action of one episode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from ray.rllib.algorithms.ppo.ppo import LEARNER_RESULTS_CURR_KL_COEFF_KEY, LEARNER_RESULTS_KL_KEY
from ray.rllib.core import ALL_MODULES
from ray.rllib.core.learner.learner import DEFAULT_OPTIMIZER, ENTROPY_KEY, POLICY_LOSS_KEY
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    EPISODE_LEN_MAX,
    EPISODE_LEN_MEAN,
    EPISODE_LEN_MIN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

GRAD_NORM_KEY = f"gradients_{DEFAULT_OPTIMIZER}_global_norm"  # the name RLlib's Learner logs its clipped norm under

# A native step-E statistic (``core.loss.policy_update``) -> RLlib's learner key for it.
UPDATE_NAMES = {"pg_loss": POLICY_LOSS_KEY, "entropy": ENTROPY_KEY, "kl": LEARNER_RESULTS_KL_KEY,
                "grad_norm": GRAD_NORM_KEY}

# The LLM iteration's phases (its ``time/...`` metrics) -> RLlib's timer names.
TIMER_NAMES = {"sampling": ENV_RUNNER_SAMPLING_TIMER, "update": LEARNER_UPDATE_TIMER,
               "sync": SYNCH_WORKER_WEIGHTS_TIMER}

# The sampling report's policy-lag keys (``llm_step``'s ``sampling/...``), logged under ``result["env_runners"]``.
PIPELINE_KEYS = ("policy_lag_mean", "policy_lag_max", "num_stale_groups_resampled")


def log_learner_update(metrics: Any, module_id: str, stats: Mapping[str, float], num_rows: int,
                       kl_coeff: float) -> None:
    """In a learner: one update's statistics under RLlib's per-module keys, and the rows it trained on."""
    for native, rllib in UPDATE_NAMES.items():
        if native in stats:
            metrics.log_value((module_id, rllib), float(stats[native]), window=1)
    if "kl" in stats:
        metrics.log_value((module_id, LEARNER_RESULTS_CURR_KL_COEFF_KEY), float(kl_coeff), window=1)
    metrics.log_value((module_id, NUM_MODULE_STEPS_TRAINED), num_rows, reduce="sum")
    metrics.log_value((module_id, NUM_MODULE_STEPS_TRAINED_LIFETIME), num_rows, reduce="lifetime_sum")
    metrics.log_value((ALL_MODULES, NUM_MODULE_STEPS_TRAINED), num_rows, reduce="sum")
    metrics.log_value((ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), num_rows, reduce="lifetime_sum")
    metrics.log_value((ALL_MODULES, NUM_ENV_STEPS_TRAINED), num_rows, reduce="sum")
    metrics.log_value((ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME), num_rows, reduce="lifetime_sum")


def log_iteration(metrics: Any, episodes: Sequence[Any], num_rows: int, learner_results: list[Any],
                  seconds: Mapping[str, float], sampling: Mapping[str, float] | None = None) -> None:
    """In the driver: one LLM iteration's episodes (``total_reward``, ``length``), the rows sampled and trained,
    the learners' results, the phases' seconds (``TIMER_NAMES``' keys) and the sampling report's policy lag
    (``PIPELINE_KEYS``), under RLlib's keys."""
    for key in PIPELINE_KEYS:
        if sampling and key in sampling:
            metrics.log_value((ENV_RUNNER_RESULTS, key), float(sampling[key]), window=1)
    if episodes:
        returns = np.array([float(e.total_reward) for e in episodes])
        lengths = np.array([float(e.length) for e in episodes])
        for key, value, reduce in ((EPISODE_RETURN_MEAN, returns.mean(), "mean"),
                                   (EPISODE_RETURN_MIN, returns.min(), "min"),
                                   (EPISODE_RETURN_MAX, returns.max(), "max"),
                                   (EPISODE_LEN_MEAN, lengths.mean(), "mean"),
                                   (EPISODE_LEN_MIN, lengths.min(), "min"),
                                   (EPISODE_LEN_MAX, lengths.max(), "max")):
            metrics.log_value((ENV_RUNNER_RESULTS, key), float(value), reduce=reduce, window=1)
    metrics.log_value((ENV_RUNNER_RESULTS, NUM_EPISODES), len(episodes), reduce="sum")
    metrics.log_value((ENV_RUNNER_RESULTS, NUM_EPISODES_LIFETIME), len(episodes), reduce="lifetime_sum")
    metrics.log_value((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED), num_rows, reduce="sum")
    metrics.log_value((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), num_rows, reduce="lifetime_sum")
    if learner_results:
        metrics.aggregate(learner_results, key=LEARNER_RESULTS)
    metrics.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, num_rows, reduce="lifetime_sum")
    metrics.log_value(NUM_ENV_STEPS_TRAINED_LIFETIME, num_rows, reduce="lifetime_sum")
    for phase, name in TIMER_NAMES.items():
        metrics.log_value((TIMERS, name), float(seconds[phase]), reduce="mean", window=1)
