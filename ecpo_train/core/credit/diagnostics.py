"""Where a run's credit engages: diagnostics computed beside any estimator on the batch its update uses
(``core.iteration.credit_step`` adds them to the estimator's own, so every run on either engine logs them as
``credit/<name>``; ``docs/training.md``, "Credit diagnostics", lists them).

* **ECPO's gate on the batch**, whatever the run's estimator (``ecpo_gate``, with the run's ``d_min``, ``eps``,
  ``tau``, ``rho_min``, ``gamma``): over the anchors (states visited >= 2 times in their group) the share
  passing StrictValid (App. A), ECPO's mean ``rho`` (also over StrictValid anchors) and the share it gates to 0
  (``ecpo_<name>`` of an ECPO run's own gate diagnostics); and how many anchors fail each
  condition: first visit before ``d_min``, one canonical action (``|U_s| < 2``), no return variation
  (``B_s + W_s <= eps``). States visited once fail ``n_s >= 2`` and are counted apart. An anchor failing two
  conditions is counted under both. For an ECPO run the shares and means equal its own.
* **Step credit**: a row's advantage minus GRPO's on the same batch. For the estimators whose trajectory term is
  GRPO's exactly (``grpo_trajectory`` on their registration) that difference is ``omega`` times their step term (ECPO's
  ``rho A_act``, GiGPO's anchor term; ``tests/test_credit_diagnostics.py`` checks it for ``ecpo`` and
  ``gigpo_std``). For the others it would hold a trajectory-level difference too (RLOO's leave-one-out
  baseline, PGPO's and HGPO's missing episode term, TIGPO's cross-temporal term of revisit groups, PPO's GAE,
  verl-agent's step-weighted episode term), so no step credit is reported for them. Reported: the share of rows
  whose step credit is not 0, and where the total ``|step credit|`` sits by the first-visit depth of the row's
  anchor (1-3, 4-6, 7-9, 10+, and below ``d_min``).
* **Distance to the baselines**: the Pearson correlation and the relative L2 distance
  ``||A - A_ref|| / ||A_ref||`` of the run's advantages to GiGPO w/std's and to GRPO's (native, on the run's
  credit settings). A constant vector has no correlation: it counts 1 when both vectors are equal, else 0; with
  ``A_ref`` all 0 the distance is 0 when ``A`` is too and is left out otherwise (the metrics stay finite).

The baselines need only the six step columns, so they are computed for every run (PPO, PACE with hidden states
and TIGPO included); nothing here swallows an error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ecpo_train.core.credit.api import compute_advantages
from ecpo_train.core.credit.config import CreditConfig
from ecpo_train.core.credit.estimators import ecpo_gate, gate_diagnostics
from ecpo_train.core.credit.registry import estimator_spec
from ecpo_train.core.rows import CreditRows

# First-visit depths of the step-credit buckets: (name, first depth, last depth)
DEPTH_BUCKETS = (("1_3", 1, 3), ("4_6", 4, 6), ("7_9", 7, 9), ("10_plus", 10, None))
STEP_TOLERANCE = 1e-9  # step credit counts where |A - A_GRPO| exceeds this times the batch's largest |advantage|
BASELINES = ("gigpo_std", "grpo")


def credit_diagnostics(estimator: str, rows: CreditRows, config: CreditConfig, advantages: Any) -> dict[str, float]:
    """The diagnostics above for ``advantages`` (the run's, one per row of ``rows``, host array) of
    ``estimator`` under ``config`` (the run's credit settings). An empty batch has none."""
    if rows.n_rows == 0:
        return {}
    native = dataclasses.replace(config, compat="native")  # the baselines are the native estimators
    adv = np.asarray(advantages, dtype=np.float64).reshape(-1)
    reference = {name: np.asarray(rows.ops.host(compute_advantages(name, rows, native)[0]),
                                  dtype=np.float64) for name in BASELINES}
    diagnostics = ecpo_gate_diagnostics(rows, native)
    if estimator_spec(estimator).grpo_trajectory and config.compat == "native":
        diagnostics |= step_credit(rows, adv, reference["grpo"], config.d_min)
    for name, ref in reference.items():
        diagnostics |= comparison(adv, ref, name)
    return diagnostics


def ecpo_gate_diagnostics(rows: CreditRows, config: CreditConfig) -> dict[str, float]:
    """ECPO's gate on ``rows`` (the module docstring): its own gate diagnostics under ``ecpo_<name>`` and the
    anchors failing each condition of StrictValid."""
    gate = ecpo_gate(rows, config)
    is_anchor = rows.anchor_sizes >= 2
    variation = rows.ops.host(gate.between + gate.within)[is_anchor]
    return {f"ecpo_{name}": value for name, value in gate_diagnostics(rows, gate).items()} | {
        "num_anchors_below_d_min": float(np.count_nonzero(rows.anchor_depth[is_anchor] < config.d_min)),
        "num_anchors_one_action": float(np.count_nonzero(rows.anchor_action_counts[is_anchor] < 2)),
        "num_anchors_equal_returns": float(np.count_nonzero(~(variation > config.eps))),
        "num_single_visit_states": float(np.count_nonzero(rows.anchor_sizes == 1)),
    }


def step_credit(rows: CreditRows, adv: np.ndarray, grpo: np.ndarray, d_min: int) -> dict[str, float]:
    """Step credit ``adv - grpo`` per row (the module docstring): the share of rows where it is not 0, and the
    shares of its total magnitude by the first-visit depth of the row's anchor (all 0 when there is none)."""
    step = adv - grpo
    scale = max(float(np.abs(adv).max()), float(np.abs(grpo).max()))
    magnitude = np.where(np.abs(step) > STEP_TOLERANCE * scale, np.abs(step), 0.0)
    total = float(magnitude.sum())
    depth = rows.anchor_depth[rows.anchor]

    def share(mask: np.ndarray) -> float:
        return float(magnitude[mask].sum() / total) if total > 0 else 0.0

    out = {"step_credit_fraction": float(np.count_nonzero(magnitude) / rows.n_rows)}
    for name, first, last in DEPTH_BUCKETS:
        out[f"step_credit_depth_{name}"] = share((depth >= first) & (depth <= (depth.max() if last is None else last)))
    out["step_credit_below_d_min"] = share(depth < d_min)
    return out


def comparison(adv: np.ndarray, ref: np.ndarray, name: str) -> dict[str, float]:
    """``corr_<name>`` (Pearson) and ``rel_dist_<name>`` (``||adv - ref|| / ||ref||``) of two advantage vectors,
    finite by the module docstring's conventions."""
    out = {f"corr_{name}": correlation(adv, ref)}
    ref_norm, diff_norm = float(np.linalg.norm(ref)), float(np.linalg.norm(adv - ref))
    if ref_norm > 0:
        out[f"rel_dist_{name}"] = diff_norm / ref_norm
    elif diff_norm == 0:
        out[f"rel_dist_{name}"] = 0.0
    return out


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's r of ``a`` and ``b``; where either is constant, 1.0 if they are equal and 0.0 otherwise."""
    if a.max() == a.min() or b.max() == b.min():
        return 1.0 if np.array_equal(a, b) else 0.0
    a_centered, b_centered = a - a.mean(), b - b.mean()
    norm = float(np.linalg.norm(a_centered) * np.linalg.norm(b_centered))
    if not norm > 0:  # spreads so small that their product underflows
        return 0.0
    return float(np.clip(a_centered @ b_centered / norm, -1.0, 1.0))
