"""ECPO's per-turn credit inside TRL's ``GRPOTrainer``: a drop-in subclass, :class:`ECPOGRPOTrainer`.

TRL trains a multi-turn agent with one row per episode: a ``rollout_func`` plays the episode and returns the first
prompt's tokens, the completion (every turn's generated tokens with the environment's tokens between them) and an
``env_mask`` (1 on generated tokens, 0 on the environment's); extra fields it returns travel with the row. GRPO then
gives every generated token of the row one advantage, the episode's. ECPO gives each turn its own.

The drop-in reads one extra field per row, ``ecpo_turns`` (:data:`TURNS_FIELD`): the episode's turns in order, each
a mapping with the state key the turn acted in (``state_key``), the canonical action it took (``action_key``), the
step reward (``reward``) and the turn's generated tokens as a ``[start, end)`` span of the completion (``start``,
``end``). An ``ecpo serve`` server gives the keys and reward of every step (``TextObservation.state_key`` of the
state before the step, ``.action_key`` and ``reward`` of the step); ``examples/trl/train_grpo.py`` records them.
:func:`turn_advantages` turns the rows into step rows, one group per GRPO group (the ``num_generations`` rows of one
prompt, consecutive in TRL's batch), and calls :func:`ecpo_train.core.credit.compute_advantages`;
:func:`token_advantages` puts each turn's advantage on its span (0 elsewhere: the environment's tokens, which
``env_mask`` also excludes from the loss). ``ECPOGRPOTrainer`` replaces GRPO's ``(rows,)`` advantages with these
``(rows, tokens)`` ones, which TRL's loss takes as they are.

What it relies on in TRL (pinned in the ``trl`` extra): ``_generate_and_score_completions`` (a private method, the
only place the advantages can be replaced) returning ``advantages`` beside ``completion_ids``, rollout fields merged
into the ``inputs`` rows, and a loss that accepts ``(rows, tokens)`` advantages. One process only: TRL spreads a
group over processes, and the credit needs a whole group in one place (more than one raises ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ecpo_gym.kwargs import shown
from ecpo_train.core.credit import check_credit, compute_advantages

TURNS_FIELD = "ecpo_turns"
_TURN_KEYS = ("state_key", "action_key", "reward", "start", "end")


def _checked_turns(episodes: Sequence[Sequence[Mapping[str, Any]]]) -> list[list[Mapping[str, Any]]]:
    checked = []
    for row, turns in enumerate(episodes):
        if not isinstance(turns, Sequence) or isinstance(turns, (str, bytes)) or len(turns) == 0:
            raise ValueError(f"{TURNS_FIELD} of row {row} must be a non-empty list of turns, got "
                             f"{type(turns).__name__}")
        for k, turn in enumerate(turns):
            missing = [key for key in _TURN_KEYS if not isinstance(turn, Mapping) or key not in turn]
            if missing:
                raise ValueError(f"{TURNS_FIELD} of row {row}, turn {k + 1} lacks {', '.join(missing)}")
            for key in ("start", "end"):  # (1.7 was cut to 1, None a TypeError naming nothing)
                if isinstance(turn[key], bool) or not isinstance(turn[key], (int, np.integer)):
                    raise ValueError(f"{TURNS_FIELD} of row {row}, turn {k + 1}: {key}={shown(turn[key])} is not a "  # noqa: TRY004
                                     "token index")
            if isinstance(turn["reward"], bool) or not isinstance(turn["reward"], (int, float, np.number)):
                raise ValueError(f"{TURNS_FIELD} of row {row}, turn {k + 1}: reward={shown(turn['reward'])} is not a "  # noqa: TRY004
                                 "number")
            if not 0 <= int(turn["start"]) <= int(turn["end"]):
                raise ValueError(f"{TURNS_FIELD} of row {row}, turn {k + 1}: span [{turn['start']}, {turn['end']}) "
                                 "is not a token span")
        checked.append(list(turns))
    return checked


def turn_advantages(group_ids: Sequence[Any], episodes: Sequence[Sequence[Mapping[str, Any]]],
                    estimator: str = "ecpo", diagnostics: dict[str, float] | None = None,
                    **credit_options: Any) -> list[np.ndarray]:
    """One advantage per turn of every episode (``episodes[i]``: its turns, see the module docstring), from
    ``compute_advantages(estimator, ...)`` over every turn as a step row: group ``group_ids[i]``, trajectory ``i``,
    step ``k + 1``, anchor key = the turn's state key, action key = its canonical action, reward = its step reward.
    ``credit_options``: ``gamma, omega, kappa, tau, d_min, rho_min, eps`` (defaults: the paper's)."""
    turns = _checked_turns(episodes)
    if len(group_ids) != len(turns):
        raise ValueError(f"{len(group_ids)} group ids for {len(turns)} episodes")
    lengths = [len(t) for t in turns]
    advantage, diag = compute_advantages(estimator, {
        "group_ids": [str(group_ids[i]) for i, n in enumerate(lengths) for _ in range(n)],
        "traj_ids": [i for i, n in enumerate(lengths) for _ in range(n)],
        "steps": [k + 1 for n in lengths for k in range(n)],
        "anchor_keys": [str(turn["state_key"]) for episode in turns for turn in episode],
        "action_keys": [str(turn["action_key"]) for episode in turns for turn in episode],
        "rewards": [float(turn["reward"]) for episode in turns for turn in episode],
    }, credit_options)
    if diagnostics is not None:
        diagnostics.update(diag)
    bounds = np.cumsum([0, *lengths])
    flat = np.asarray(advantage, dtype=np.float64)
    return [flat[bounds[i]:bounds[i + 1]] for i in range(len(lengths))]


def token_advantages(episodes: Sequence[Sequence[Mapping[str, Any]]], advantages: Sequence[np.ndarray],
                     length: int) -> np.ndarray:
    """``(rows, length)``: each turn's advantage on its ``[start, end)`` span of the completion, 0 elsewhere."""
    turns = _checked_turns(episodes)
    out = np.zeros((len(turns), length), dtype=np.float64)
    for row, (episode, values) in enumerate(zip(turns, advantages, strict=True)):
        for turn, value in zip(episode, values, strict=True):
            start, end = int(turn["start"]), int(turn["end"])
            if end > length:
                raise ValueError(f"{TURNS_FIELD} of row {row}: span [{start}, {end}) runs past the completion's "
                                 f"{length} tokens")
            out[row, start:end] = value
    return out


def check_trl_credit(estimator: str, credit_options: Mapping[str, Any] | None) -> None:
    """``ValueError`` for a credit the drop-in cannot compute, found when the trainer is built rather than after the
    first batch's generation: an unknown estimator, a hyperparameter it refuses, or one that needs what a TRL row
    does not carry (critic values, a task's history across updates)."""
    if credit_options is not None and not isinstance(credit_options, Mapping):
        raise ValueError(f"credit_options must be a dict of credit hyperparameters, got {type(credit_options).__name__}")
    spec, _, _ = check_credit(estimator, dict(credit_options or {}))
    needs = [what for what, needed in (("critic values", spec.needs_values), ("a task history", spec.keeps_state))
             if needed]
    if needs:
        raise ValueError(f"credit_estimator={shown(estimator)} needs {' and '.join(needs)}, which ECPOGRPOTrainer's rows do "
                         "not carry: use a critic-free estimator (ecpo, gigpo, grpo, ...)")


def ecpo_grpo_trainer() -> type:
    """:class:`ECPOGRPOTrainer` (TRL is imported here, on first use: the credit functions above need no TRL)."""
    from trl import GRPOTrainer

    class ECPOGRPOTrainer(GRPOTrainer):
        """``GRPOTrainer`` whose advantages are ECPO's per turn (``credit_estimator``, default ``"ecpo"``; any
        estimator of ``compute_advantages`` works), from each row's ``ecpo_turns`` field. Takes GRPOTrainer's
        arguments plus ``credit_estimator`` and ``credit_options`` (a dict: ``gamma``, ``omega``, ...)."""

        def __init__(self, *args: Any, credit_estimator: str = "ecpo",
                     credit_options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
            check_trl_credit(credit_estimator, credit_options)  # before the model loads, not after the first batch
            super().__init__(*args, **kwargs)
            if self.accelerator.num_processes > 1:
                raise ValueError("ECPOGRPOTrainer runs on one process: TRL spreads a GRPO group over processes and "
                                 "the credit needs each group whole")
            self.credit_estimator = credit_estimator
            self.credit_options = dict(credit_options or {})
            self.credit_diagnostics: dict[str, float] = {}

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            output = super()._generate_and_score_completions(inputs)  # merges rollout fields into ``inputs``
            missing = [i for i, row in enumerate(inputs) if TURNS_FIELD not in row]
            if missing:
                raise ValueError(f"row {missing[0]} has no {TURNS_FIELD!r} field: the rollout_func must return "
                                 f"one list of turns per row under {TURNS_FIELD!r}")
            size = self.num_generations if self.model.training else self.num_generations_eval
            groups = [i // size for i in range(len(inputs))]
            episodes = [row[TURNS_FIELD] for row in inputs]
            per_turn = turn_advantages(groups, episodes, self.credit_estimator, self.credit_diagnostics,
                                       **self.credit_options)
            completion_ids = output["completion_ids"]
            values = token_advantages(episodes, per_turn, completion_ids.shape[1])
            advantages = output["advantages"]
            output["advantages"] = advantages.new_tensor(values)
            return output

    return ECPOGRPOTrainer


__all__ = ["TURNS_FIELD", "ecpo_grpo_trainer", "token_advantages", "turn_advantages"]
