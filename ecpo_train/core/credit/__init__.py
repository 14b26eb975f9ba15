"""ECPO's credit: pure advantage estimators, one call for all of them, :func:`compute_advantages`.

The estimators (``available_estimators()``, in registration order; ``tests/test_credit_api.py`` checks that every
registered one is listed here):

* ``grpo``: GRPO's trajectory advantage (eq. grpo_adv); ``rloo``: the leave-one-out baseline;
* ``gigpo``, ``gigpo_std``: GiGPO's anchor credit, without and with its std (the paper's baseline);
* ``ecpo``: ECA + VarGate + StrictValid (eq. ecpo_adv); its ablations ``ecpo_eca_only`` and ``ecpo_vargate_only``,
  and App. C's reading on the anchor's scale, ``ecpo_anchor_scale`` and ``ecpo_anchor_scale_eca_only``;
* ``pgpo``, ``hgpo``, ``graphgpo``, ``tigpo``, ``pace``: other papers' step credit (``docs/paper_notes.md``);
* ``ppo``: GAE on a learned critic's values.

One row per environment step goes in (``group_id``, ``traj_id``, ``step`` 1-based, ``anchor_key``,
``action_key``, ``reward``); one advantage per row and a diagnostics dict come out. The module imports
neither gym nor RLlib, and torch only when a torch tensor is passed, so the same functions serve the native
trainer, RLlib and any other trainer (verl, TRL, OpenRLHF) through :func:`compute_advantages`.

How the work is split:

* keys become integer codes once, host-side (:func:`factorize_keys`); everything structural (which row
  belongs to which trajectory, anchor and canonical action; counts; depths) is then integer arrays;
* every statistic is a segment reduction (``bincount`` / ``index_add``) over those codes, written once
  against a two-method backend so numpy arrays and (CPU or CUDA) torch tensors run the same code;
* each paper equation is one function in :mod:`.equations`, named after it, with its label in the docstring.

Decisions where the paper is loose (``docs/ARCHITECTURE.md``, the credit contract):

* a trajectory is identified by the pair ``(group_id, traj_id)``; an anchor by ``(group_id, anchor_key)``;
  a canonical action by ``(anchor, action_key)`` -- ``"<invalid>"`` is one canonical action like any other;
* ``G_{i,t}`` is the discounted sum of the trajectory's rewards from step t (penalties included),
  ``R_i`` the undiscounted sum; steps of a trajectory must be exactly ``1..T_i`` (no gaps, no duplicates);
* GRPO/GiGPO standard deviations are unbiased (n-1); a set of equal values (a singleton included) gets an
  advantage of exactly 0; ECA's ``sigma_act`` and VarGate's ``B_s``/``W_s`` are population statistics;
* ``rho = 0`` unless the anchor is StrictValid (App. A), then ``rho = max(rho_VG, rho_min)``.

Names: the anchor column is ``anchor_keys`` here, ``anchor_key`` in ``TrajectoryBatch`` and ``anchor_key`` in the
rollout, which fills it from the env info field the run's ``anchor_key`` setting names (the structured
``state_key``, or the normalised observation ``observation_key``). One name from the rollout to this module is clearer than two, and the env's structured ``state_key``
keeps its own name (a batch extra, read by the PPO critic).

All arithmetic is float64. Numpy in gives numpy float64 out; torch in (``rewards`` a tensor) gives a
float64 tensor on the rewards' device.

Layout: :mod:`.registry` (estimator names, what each asks for and the hyperparameters each declares, with their
ranges), :mod:`.config` (``CreditConfig``: the paper's shared values and the declared hyperparameters),
:mod:`.equations` (one function per paper equation, and ``moments``, the statistics they share),
:mod:`.estimators` (one module per estimator family, one function per estimator), :mod:`.api`
(:func:`compute_advantages`), :mod:`.diagnostics` (what every run logs beside its estimator) and :mod:`.history`
(the frozen view of earlier updates an estimator that keeps state reads: TIGPO's ``TaskHistory``). The rows they read are the step-row table's, validated and coded once in ``ecpo_train.core.rows`` (numpy/torch operations in
``ecpo_train.core.backend``).
"""

from __future__ import annotations

from ecpo_train.core.credit.api import STEP_COLUMNS, check_credit, compute_advantages
from ecpo_train.core.credit.config import COMPAT_MODES, CreditConfig
from ecpo_train.core.credit.equations import (
    between_action_variance,
    eca_action_std,
    eca_advantage,
    eca_shrinkage,
    ecpo_advantage,
    future_return,
    gae_advantage,
    gigpo_advantage,
    gigpo_anchor_advantage,
    grpo_advantage,
    reliability_weight,
    rloo_advantage,
    strict_valid,
    trajectory_return,
    vargate_reliability,
    verl_agent_episode_advantage,
    within_action_variance,
)
from ecpo_train.core.credit.estimators import gae_targets
from ecpo_train.core.credit.history import TaskHistory
from ecpo_train.core.credit.registry import (
    EstimatorInputs,
    EstimatorSpec,
    Hyperparameter,
    available_estimators,
    check_group_size,
    estimator_spec,
    get_estimator,
    register_estimator,
)
from ecpo_train.core.rows import MAX_RETURN_MAGNITUDE, CreditRows, factorize_keys, prepare_rows

__all__ = [
    "COMPAT_MODES",
    "MAX_RETURN_MAGNITUDE",
    "STEP_COLUMNS",
    "CreditConfig",
    "CreditRows",
    "EstimatorInputs",
    "EstimatorSpec",
    "Hyperparameter",
    "TaskHistory",
    "available_estimators",
    "between_action_variance",
    "check_credit",
    "check_group_size",
    "compute_advantages",
    "eca_action_std",
    "eca_advantage",
    "eca_shrinkage",
    "ecpo_advantage",
    "estimator_spec",
    "factorize_keys",
    "future_return",
    "gae_advantage",
    "gae_targets",
    "get_estimator",
    "gigpo_advantage",
    "gigpo_anchor_advantage",
    "grpo_advantage",
    "prepare_rows",
    "register_estimator",
    "reliability_weight",
    "rloo_advantage",
    "strict_valid",
    "trajectory_return",
    "vargate_reliability",
    "verl_agent_episode_advantage",
    "within_action_variance",
]

