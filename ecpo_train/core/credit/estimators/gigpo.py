"""GiGPO (Sec. 3): GRPO's episode term plus ``omega`` times the anchor term ``G - mu_s`` (``gigpo``) or its z-score
(``gigpo_std``, the paper's baseline), and the compatibility mode ``compat="verl-agent"`` that reproduces
verl-agent's episode term (GraphGPO's recipe reads it too)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from ecpo_train.core.credit.equations import (
    gigpo_advantage,
    gigpo_anchor_advantage,
    verl_agent_episode_advantage,
)
from ecpo_train.core.credit.estimators.base import finish, grpo_rows, returns_of
from ecpo_train.core.credit.registry import Advantages, EstimatorInputs, Hyperparameter, register_estimator
from ecpo_train.core.rows import CreditRows

if TYPE_CHECKING:
    from ecpo_train.core.credit import CreditConfig  # the type (the package builds it after these register)

COMPAT_MODES = ("native", "verl-agent")
COMPAT = Hyperparameter("compat", Literal[COMPAT_MODES], "native",
                        "verl-agent reproduces verl-agent's GiGPO episode term (verl_agent_episode_advantage)")


def episode_rows(rows: CreditRows, ret: Any, config: CreditConfig, normalize_std: bool) -> Any:
    """Each row's episode term: GRPO's (once per trajectory), or under ``compat="verl-agent"`` verl-agent's GiGPO
    episode normalisation (statistics over the group's step rows, :func:`verl_agent_episode_advantage`), which its
    GiGPO and its GraphGPO recipe both use."""
    if config.compat == "verl-agent":
        return verl_agent_episode_advantage(
            ret.trajectory, rows.dev["traj"], rows.dev["row_group"], rows.n_groups, config.eps, normalize_std
        )
    return grpo_rows(rows, ret, config)


def _gigpo(rows: CreditRows, config: CreditConfig, normalize_std: bool) -> Advantages:
    ret = returns_of(rows, config)
    trajectory_adv = episode_rows(rows, ret, config, normalize_std)
    anchor_adv = gigpo_anchor_advantage(ret.future, rows.dev["anchor"], rows.n_anchors, config.eps, normalize_std)
    return finish(rows, ret, gigpo_advantage(trajectory_adv, anchor_adv, config.omega))


@register_estimator("gigpo", hyperparameters=(COMPAT,), grpo_trajectory=True)
def gigpo_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """GiGPO without std: ``A^GRPO_i + omega (G_{i,t} - mu_s)``.

    ``compat="verl-agent"`` gives verl-agent's ``mode="mean_norm"`` numbers (episode term unscaled too)."""
    return _gigpo(rows, config, normalize_std=False)


@register_estimator("gigpo_std", hyperparameters=(COMPAT,), grpo_trajectory=True)
def gigpo_std_estimator(rows: CreditRows, config: CreditConfig, inputs: EstimatorInputs) -> Advantages:
    """GiGPO_w/std: ``A^GRPO_i + omega (G_{i,t} - mu_s) / (sigma_s + eps)`` (the paper's GiGPO baseline).

    ``compat="verl-agent"`` gives verl-agent's ``mode="mean_std_norm"`` numbers."""
    return _gigpo(rows, config, normalize_std=True)

