"""PPO's baseline (the paper's actor-critic comparison): generalised advantage estimation (eq. gae) on a learned
critic's values, whitened over the batch; and the critic's regression targets (:func:`gae_targets`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from annotated_types import Interval

from ecpo_train.core.config_values import coerce_value
from ecpo_train.core.credit.equations import gae_advantage
from ecpo_train.core.credit.registry import Advantages, EstimatorInputs, Hyperparameter, register_estimator
from ecpo_train.core.rows import CreditRows, check_finite_numbers, host_values

if TYPE_CHECKING:
    from ecpo_train.core.credit import CreditConfig  # the type (the package builds it after these register)

GAE_LAMBDA = Hyperparameter("gae_lambda", Annotated[float, Interval(ge=0, le=1)], 0.95,
                            "GAE's lambda, PPO's own (gamma is the credit config's)", option=True)


def _gae_rows(rows: CreditRows, values: Any, config: CreditConfig, gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    """eq. gae on the host (values come from a critic on any device): ``(advantages, values)`` per row, float64."""
    gae_lambda = coerce_value(GAE_LAMBDA.name, GAE_LAMBDA.type, gae_lambda)
    values = np.asarray(host_values(values, "values"))
    if values.shape != (rows.n_rows,):
        raise ValueError(f"values has shape {values.shape}, expected ({rows.n_rows},): one V(s) per step row")
    check_finite_numbers(values, "values")  # a nan V(s) would make every advantage nan (whitening mixes them)
    values = values.astype(np.float64)
    rewards = np.asarray(rows.ops.host(rows.reward), dtype=np.float64)
    adv = gae_advantage(rewards, values, rows.traj, rows.position, rows.n_trajs, rows.horizon, config.gamma,
                        float(gae_lambda))
    return adv, values


def gae_targets(rows: CreditRows, values: Any, config: CreditConfig, gae_lambda: float = GAE_LAMBDA.default
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(advantages, value targets)`` per row of eq. gae: the raw GAE advantages and the critic's regression
    targets, the lambda-returns ``A_t + V(s_t)`` (what the ``ppo`` estimator's critic is fitted to)."""
    adv, values = _gae_rows(rows, values, config, gae_lambda)
    return adv, adv + values


@register_estimator("ppo", needs_values=True, group_relative=False, hyperparameters=(GAE_LAMBDA,))
def ppo_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """PPO's baseline: eq. gae on a learned critic's ``inputs.values``, whitened over the batch. ``gamma`` is the
    credit config's; ``gae_lambda`` (an option) is PPO's own. Diagnostics: the mean value and the std of the
    advantages before whitening."""
    adv, _ = _gae_rows(rows, inputs.values, config, inputs.options[GAE_LAMBDA.name])
    whitened = (adv - adv.mean()) / (adv.std() + 1e-8)
    value_mean = float(np.asarray(host_values(inputs.values, "values")).mean())  # in the critic's own dtype
    return rows.ops.asarray(whitened), {"value_mean": value_mean, "advantage_std": float(adv.std())}
