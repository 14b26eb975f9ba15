"""Exact action values of a diagnostic MDP by finite-horizon dynamic programming.

Works on any ``transition_model`` of the form ``state -> action -> [Outcome]`` (see ``env.py``). Values
are discounted returns ``G`` as the credit estimators define them (eq. future_return), for a fixed policy
(``policy[state][action] = probability``; missing states act uniformly over their actions) or, with
``policy=None``, for the optimal policy. ``horizon`` is the number of steps left, so truncation at the
env's ``max_steps`` is modelled exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ecpo_gym.diagnostic.env import Outcome
from ecpo_gym.kwargs import shown

TransitionModel = Mapping[str, Mapping[str, list[Outcome]]]
Policy = Mapping[str, Mapping[str, float]]


@dataclass
class ActionValues:
    """``q[state][action]``, ``v[state]`` and the success probability ``win[state]`` with ``horizon`` steps left."""

    q: dict[str, dict[str, float]]
    v: dict[str, float]
    win: dict[str, float]
    q_win: dict[str, dict[str, float]]


def _action_probs(model: TransitionModel, state: str, policy: Policy | None,
                  q_row: dict[str, float]) -> dict[str, float]:
    actions = list(model[state])
    if policy is None:  # greedy, ties split evenly
        best = max(q_row.values())
        winners = [a for a in actions if q_row[a] >= best - 1e-12]
        return {a: (1.0 / len(winners) if a in winners else 0.0) for a in actions}
    row = policy.get(state)
    if row is None:
        return {a: 1.0 / len(actions) for a in actions}
    total = sum(max(0.0, float(row.get(a, 0.0))) for a in actions)
    if total <= 0:
        raise ValueError(f"policy gives no probability to any admissible action of state {shown(state)}")
    return {a: max(0.0, float(row.get(a, 0.0))) / total for a in actions}


def action_values(model: TransitionModel, *, gamma: float, horizon: int,
                  policy: Policy | None = None) -> ActionValues:
    """Q, V and success probability of every state with ``horizon`` steps left (backward induction)."""
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    v_next: dict[str, float] = {}
    win_next: dict[str, float] = {}
    q: dict[str, dict[str, float]] = {}
    q_win: dict[str, dict[str, float]] = {}
    for _ in range(horizon):
        q, q_win, v, win = {}, {}, {}, {}
        for state, actions in model.items():
            q[state], q_win[state] = {}, {}
            for action, outcomes in actions.items():
                value = success = 0.0
                for o in outcomes:
                    cont = 0.0 if o.terminated else gamma * v_next.get(o.next_state, 0.0)
                    value += o.prob * (o.reward + cont)
                    success += o.prob * (1.0 if o.won else (0.0 if o.terminated else
                                                             win_next.get(o.next_state, 0.0)))
                q[state][action] = value
                q_win[state][action] = success
            probs = _action_probs(model, state, policy, q[state])
            v[state] = sum(p * q[state][a] for a, p in probs.items())
            win[state] = sum(p * q_win[state][a] for a, p in probs.items())
        if v == v_next and win == win_next:  # a fixed point: more steps left change nothing
            break
        v_next, win_next = v, win
    return ActionValues(q=q, v=v_next, win=win_next, q_win=q_win)


def success_probability(model: TransitionModel, start: str, *, horizon: int,
                        policy: Policy | None = None) -> float:
    """Exact probability that an episode from ``start`` is won within ``horizon`` steps under ``policy``."""
    return action_values(model, gamma=1.0, horizon=horizon, policy=policy).win[start]


def exact_success(env: object, task_ids: list[str], action_probabilities: object) -> float | None:
    """Mean exact success probability over ``task_ids`` of a policy given as ``action_probabilities(state_key,
    actions) -> {action: probability}``, on an env exposing its MDP (``transition_model``, ``initial_state``,
    ``max_steps``: the diagnostic corridors); ``None`` for any other env.

    A noise-free validation figure: no sampled episodes, so two runs differ only where their policies do.
    """
    if not (hasattr(env, "transition_model") and hasattr(env, "initial_state")) or not task_ids:
        return None
    wins = []
    for task_id in task_ids:
        model = env.transition_model(task_id)  # type: ignore[attr-defined]
        distribution = {state: action_probabilities(state, list(actions)) for state, actions in model.items()}  # type: ignore[operator]
        start = env.initial_state(task_id)  # type: ignore[attr-defined]
        wins.append(success_probability(model, start, horizon=int(env.max_steps), policy=distribution))  # type: ignore[attr-defined]
    return sum(wins) / len(wins)
