"""Closed forms of the paper's appendix C (the two-action divergent anchor), for tests and the credit study.

Setting: at an anchor, a frequent good action ``u+`` is sampled ``m`` times with success probability
``p_plus``, a rare bad action ``u-`` once with ``p_minus < p_plus``; future returns are binary (1 success).
"""

from __future__ import annotations

import math


def gigpo_bad_event_probability(p_plus: float, p_minus: float, m: int) -> float:
    """``P(A^-_GiGPO > Abar^+_GiGPO) = p_- (1 - p_+^m)`` (eq. gigpo_bad_event_prob): the lucky singleton
    succeeds while the frequent action is not perfectly successful."""
    _check(p_plus, p_minus, m)
    return p_minus * (1.0 - p_plus**m)


def gigpo_bad_gap_expectation(p_plus: float, p_minus: float, m: int, eps: float = 1e-6) -> float:
    """``E[Delta^-_GiGPO] = p_- sum_{k<m} C(m,k) p_+^k (1-p_+)^(m-k) (1 - k/m) / (sqrt(mu_k (1-mu_k)) + eps)``
    with ``mu_k = (k+1)/(m+1)`` (eq. gigpo_bad_gap): the expected positive advantage gap of the bad action
    over the frequent action's mean, with GiGPO's population-std normalisation of binary returns."""
    _check(p_plus, p_minus, m)
    total = 0.0
    for k in range(m):
        mu_k = (k + 1) / (m + 1)
        weight = math.comb(m, k) * p_plus**k * (1.0 - p_plus) ** (m - k)
        total += weight * (1.0 - k / m) / (math.sqrt(mu_k * (1.0 - mu_k)) + eps)
    return p_minus * total


def eca_singleton_shrinkage_factor(kappa: float) -> float:
    """``1 / (1 + kappa)``: how much ECA shrinks a singleton's centred evidence (eq. bad_shrinkage)."""
    if kappa <= 0:
        raise ValueError(f"kappa must be > 0, got {kappa}")
    return 1.0 / (1.0 + kappa)


def _check(p_plus: float, p_minus: float, m: int) -> None:
    if not (0.0 <= p_minus <= 1.0 and 0.0 <= p_plus <= 1.0):
        raise ValueError(f"probabilities must lie in [0, 1], got p_plus={p_plus}, p_minus={p_minus}")
    if int(m) != m or m < 1:
        raise ValueError(f"m (visits of the frequent action) must be a positive integer, got {m}")
