"""ECPO inside verl-agent: a drop-in for its ``gigpo.core_gigpo.compute_gigpo_outcome_advantage``.

verl-agent (github.com/langfengQ/verl-agent) trains on one batch row per environment step and computes GiGPO
from these per-row columns::

    token_level_rewards  [rows, response_len]  the row's episode score on its last valid response token
    step_rewards         [rows]                discounted return-to-go G_t (``compute_step_discounted_returns``)
    response_mask        [rows, response_len]
    anchor_obs, index, traj_index              non_tensor_batch['anchor_obs'], ['uid'], ['traj_uid']

:func:`compute_ecpo_outcome_advantage` takes the same columns plus the canonical action of every row (verl-agent
throws it away; see the function's docstring for where to keep it) and returns ``(advantages, returns)`` of
shape ``[rows, response_len]`` as verl-agent's function does. The credit itself is
:func:`ecpo_train.core.credit.compute_advantages`; this module only turns verl-agent's columns into its step rows
and broadcasts the per-row advantage back over the response tokens. Nothing here imports verl.

How the columns become step rows:

* steps: a trajectory is ``(index, traj_index)``; its step numbers are either given (``steps``, recorded on
  the rollout output) or read from the batch order, which is verl-agent's layout right after the rollout
  (``TrajectoryCollector.gather_rollout_data`` appends each trajectory's rows contiguously, in step order);
* per-step rewards: ``r_t = G_t - gamma * G_{t+1}`` (``G_{T+1} = 0``) from ``step_rewards``, so the credit
  recomputes exactly verl-agent's ``G_t`` and ``R_i = sum_t r_t``; every row's episode score
  (``token_level_rewards.sum(-1)``) must equal that ``R_i``;
* rows sharing ``(index, traj_index, step)`` (verl-agent's ``adjust_batch(mode="copy")`` appends copies of
  random rows) are one step row: the credit sees it once and every copy gets its advantage.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ecpo_gym.kwargs import shown
from ecpo_train.core.credit import CreditConfig, compute_advantages, factorize_keys

GIGPO_MODES = {"mean_norm": "gigpo", "mean_std_norm": "gigpo_std"}
"""verl-agent's ``algorithm.gigpo.mode`` -> the ``credit.py`` estimator that reproduces it (``compat="verl-agent"``)."""

SCORE_TOLERANCE = 1e-4
"""Absolute tolerance (plus 1e-5 relative) between a row's episode score and ``sum_t r_t``: both come from
float32 tensors."""


def trajectory_steps(traj_index: Any) -> np.ndarray:
    """1-based position of every row within its trajectory, in batch order.

    This is how verl-agent's ``compute_step_discounted_returns`` reads the rollout output (a trajectory's rows
    in step order). Record it there, before ``adjust_batch`` and ``_balance_batch`` reorder and copy rows::

        batch.non_tensor_batch["step_index"] = trajectory_steps(batch.non_tensor_batch["traj_uid"])
    """
    codes, n_trajs = factorize_keys(traj_index, "traj_index")
    return _rank_in_batch_order(codes, n_trajs) + 1


def compute_ecpo_outcome_advantage(
    token_level_rewards: Any,
    step_rewards: Any,
    response_mask: Any,
    anchor_obs: Any,
    index: Any,
    traj_index: Any,
    epsilon: float = CreditConfig.eps,
    step_advantage_w: float = CreditConfig.omega,
    mode: str = "mean_norm",
    enable_similarity: bool = False,
    similarity_thresh: float = 0.95,
    *,
    action_keys: Any,
    estimator: str = "ecpo",
    steps: Any = None,
    gamma: float = CreditConfig.gamma,
    kappa: float = CreditConfig.kappa,
    tau: float = CreditConfig.tau,
    d_min: int = CreditConfig.d_min,
    rho_min: float = CreditConfig.rho_min,
    diagnostics: dict[str, float] | None = None,
    hidden_states: Any = None,
    history: Any = None,
    **credit_options: Any,
) -> tuple[Any, Any]:
    """ECPO (or GiGPO, GRPO, ...) advantages with verl-agent's GiGPO calling convention.

    Positional arguments through ``similarity_thresh`` are verl-agent's, in its order and with its
    meaning; ``step_advantage_w`` is the paper's ``omega`` and ``epsilon`` its ``eps``.

    ``action_keys`` (one per row): the canonical action taken at that step. In verl-agent it is the projected
    action string of the row, ``actions[i]`` in ``actions, valids = self.projection_f(text_actions, ...)`` of
    the env manager's ``step`` (``agent_system/environments/env_manager.py``), or
    ``ecpo_gym.canonical.INVALID_ACTION`` (``"<invalid>"``) where ``valids[i]`` is 0. verl-agent does not keep
    it; ``examples/verl_agent/README.md`` shows the two lines that carry it into
    ``non_tensor_batch["action_key"]``.

    ``estimator``: ``"ecpo"`` (default) or any other estimator registered in ``credit.py``
    (``ecpo_eca_only``, ``ecpo_vargate_only``, ``grpo``, ``rloo``, ``pgpo``, ``hgpo``, ``graphgpo``, ``pace``,
    ...); their own hyperparameters (``pgpo_alpha``, ``hgpo_history``, ``graph_gamma``, ... of
    :class:`~ecpo_train.core.credit.CreditConfig`) go in ``credit_options``, and ``hidden_states`` (one vector
    per row, e.g. the actor's last hidden state of the prompt) to an estimator that reads them (``pace``), and
    ``history`` (one :class:`~ecpo_train.core.credit.history.TaskHistory` per row: its task's graph from earlier
    updates and, for a revisit, its exploration group's scores) to one that keeps state across updates
    (``tigpo``; keep a ``ecpo_train.core.task_memory.TaskGraphMemory`` beside the trainer: its ``history(task)``
    gives a row's entry and ``absorb_columns`` takes the batch after the update);
    ``"gigpo"``/``"gigpo_std"`` are
    verl-agent's own GiGPO: ``mode="mean_norm"`` selects ``credit.py``'s
    ``gigpo`` and ``"mean_std_norm"`` its ``gigpo_std``, both with ``compat="verl-agent"``, which give
    verl-agent's numbers (``"gigpo_std"`` requires ``mode="mean_std_norm"``). ``mode`` must be one of the
    two for every estimator but selects nothing outside GiGPO: ECPO's and GRPO's terms are std-normalised by
    definition (eqs. grpo_adv, eca_adv) and their episode term is over trajectories, not step rows.
    ``enable_similarity=True`` (verl-agent's fuzzy anchor matching) is rejected: anchors match exactly
    (paper App. A); ``similarity_thresh`` is accepted for signature compatibility and unused.

    ``steps`` (optional, one per row): the 1-based step number of each row, as :func:`trajectory_steps`
    records it on the rollout output. Without it, steps are read from the batch order, which assumes
    verl-agent's rollout layout: each trajectory's rows contiguous and in step order. A trajectory whose rows
    are split raises ``ValueError``; this is what verl-agent's ``_balance_batch`` and
    ``adjust_batch(mode="copy")`` do to the batch before ``compute_advantage``, so pass ``steps`` there.
    Rows with the same ``(index, traj_index, step)`` must be identical copies; their trajectory must have
    steps exactly ``1..T`` (``adjust_batch(mode="delete")`` leaves gaps, which raise).

    ``gamma`` must be the discount verl-agent used for ``step_rewards`` (``algorithm.gamma``): it turns
    ``step_rewards`` back into per-step rewards. Each row's ``token_level_rewards.sum(-1)`` must equal its
    trajectory's ``R_i = sum_t r_t``; a wrong ``gamma`` breaks this, and so do verl-agent's per-row
    invalid-action penalty and KL-in-reward, which are not per-step rewards (the README shows how to move the
    penalty into the environment's step reward, where ECPO's contract has it). ``kappa, tau, d_min, rho_min``
    are ECPO's (defaults: the paper's, from :class:`~ecpo_train.core.credit.CreditConfig`).

    Returns ``(advantages, returns)``, each ``[rows, response_len]``: the row's advantage on every response
    token, multiplied by ``response_mask``, in the dtype of ``token_level_rewards`` (a torch tensor on its
    device when it is one, else numpy). ``returns`` equals ``advantages``, as verl-agent's GiGPO returns
    ``(scores, scores)``; it is a separate copy. If ``diagnostics`` is a dict, the credit's diagnostics
    (divergent-anchor fraction, mean rho, ...) are written into it. Bad input raises ``ValueError``.
    """
    credit_name = _credit_estimator(estimator, mode, enable_similarity)
    scores = _host_matrix(token_level_rewards, "token_level_rewards").sum(axis=-1)
    mask = _host_matrix(response_mask, "response_mask")
    n = len(scores)
    if n == 0:
        raise ValueError("no rows: credit needs at least one step row")
    if mask.shape[0] != n:
        raise ValueError(f"response_mask has {mask.shape[0]} rows, token_level_rewards {n}")
    returns_to_go = _host_column(step_rewards, "step_rewards", n).astype(np.float64)
    columns = {
        name: _host_column(values, name, n)
        for name, values in {"anchor_obs": anchor_obs, "index": index, "traj_index": traj_index,
                             "action_keys": action_keys}.items()
    }

    traj, n_trajs = _trajectory_codes(columns["index"], columns["traj_index"])
    if steps is None:
        step = _steps_from_batch_order(traj, n_trajs, columns)
    else:
        step = _host_column(steps, "steps", n)
        if step.dtype == object:  # verl's non_tensor_batch holds object arrays
            step = np.asarray(step.tolist())
        if step.dtype.kind not in "iu" and not (step.dtype.kind == "f" and np.all(step == np.round(step))):
            raise ValueError(f"steps must be whole numbers (1-based step index), got dtype {step.dtype}")
        step = step.astype(np.int64)
        if step.min() < 1:
            raise ValueError("steps are 1-based: every step must be >= 1")

    # One step row per (trajectory, step): np.unique sorts the pairs, so kept rows are in (traj, step) order.
    _, kept, row_of = np.unique(traj * (int(step.max()) + 1) + step, return_index=True, return_inverse=True)
    row_of = row_of.reshape(-1)
    _check_copies(row_of, kept, columns, returns_to_go, scores)
    rewards = _per_step_rewards(returns_to_go[kept], traj[kept], step[kept], columns, kept, gamma)
    _check_scores(scores[kept], rewards, traj[kept], n_trajs, columns, kept, gamma)

    options = dict(credit_options)
    # verl-agent's GiGPO modes are its own numbers; any other estimator takes ``compat`` from ``credit_options``
    # (``compat="verl-agent"`` gives the GraphGPO recipe's episode term)
    compat = options.pop("compat", "verl-agent" if credit_name in GIGPO_MODES.values() else "native")
    advantage, diag = compute_advantages(
        credit_name,
        {"group_ids": columns["index"][kept], "traj_ids": columns["traj_index"][kept], "steps": step[kept],
         "anchor_keys": columns["anchor_obs"][kept], "action_keys": columns["action_keys"][kept], "rewards": rewards},
        {"gamma": gamma, "omega": step_advantage_w, "kappa": kappa, "tau": tau, "d_min": d_min, "rho_min": rho_min,
         "eps": epsilon, "compat": compat, **options},
        hidden_states=None if hidden_states is None else _host(hidden_states)[kept],
        history=None if history is None else list(_host_column(history, "history", n)[kept]),
    )
    if diagnostics is not None:
        diagnostics.update(diag)
    token_advantages = advantage[row_of][:, None] * mask
    return _like(token_advantages, token_level_rewards), _like(token_advantages, token_level_rewards)


# --------------------------------------------------------------------------------------------------------
# Column handling
# --------------------------------------------------------------------------------------------------------
def _credit_estimator(estimator: str, mode: str, enable_similarity: bool) -> str:
    if mode not in GIGPO_MODES:
        raise ValueError(f"mode={shown(mode)}; verl-agent's GiGPO modes are {', '.join(GIGPO_MODES)}")
    if enable_similarity:
        raise ValueError("enable_similarity=True is not supported: ECPO matches anchors exactly (paper App. A)")
    if estimator == "gigpo":
        return GIGPO_MODES[mode]
    if estimator == "gigpo_std" and mode != "mean_std_norm":
        raise ValueError("estimator='gigpo_std' is verl-agent's mode='mean_std_norm'; use estimator='gigpo'")
    return estimator


def _is_torch(values: Any) -> bool:
    return type(values).__module__.split(".")[0] == "torch"


def _host(values: Any) -> np.ndarray:
    if _is_torch(values):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def _host_matrix(values: Any, name: str) -> np.ndarray:
    matrix = _host(values)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be [rows, response_len], got shape {matrix.shape}")
    return matrix.astype(np.float64)


def _host_column(values: Any, name: str, n: int) -> np.ndarray:
    column = _host(values)
    if column.ndim == 2 and column.shape[1] == 1:
        column = column[:, 0]
    if column.shape != (n,):
        raise ValueError(f"{name} has shape {column.shape}, expected ({n},): one entry per batch row")
    return column


def _like(values: np.ndarray, template: Any) -> Any:
    """``values`` as a tensor/array of ``template``'s type, dtype and device."""
    if _is_torch(template):
        import torch

        return torch.as_tensor(values, device=template.device).to(template.dtype)
    dtype = np.asarray(template).dtype
    return values.astype(dtype if dtype.kind == "f" else np.float64)


def _trajectory_codes(index: np.ndarray, traj_index: np.ndarray) -> tuple[np.ndarray, int]:
    group, _ = factorize_keys(index, "index")
    local, n_local = factorize_keys(traj_index, "traj_index")
    pairs, traj = np.unique(group * n_local + local, return_inverse=True)
    return traj.reshape(-1), len(pairs)


def _rank_in_batch_order(codes: np.ndarray, n_codes: int) -> np.ndarray:
    """0-based rank of every row among the rows of its code, in batch order."""
    order = np.argsort(codes, kind="stable")
    first = np.cumsum(np.bincount(codes, minlength=n_codes)) - np.bincount(codes, minlength=n_codes)
    rank = np.empty(len(codes), dtype=np.int64)
    rank[order] = np.arange(len(codes)) - first[codes[order]]
    return rank


def _steps_from_batch_order(traj: np.ndarray, n_trajs: int, columns: dict[str, np.ndarray]) -> np.ndarray:
    """Steps from verl-agent's rollout layout, after checking each trajectory's rows are one contiguous run."""
    run_starts = np.flatnonzero(np.r_[True, traj[1:] != traj[:-1]])
    if len(run_starts) != n_trajs:
        runs = np.bincount(traj[run_starts], minlength=n_trajs)
        row = int(np.flatnonzero(runs[traj] > 1)[0])
        raise ValueError(
            f"trajectory (index={shown(columns['index'][row])}, traj_index={shown(columns['traj_index'][row])}) has its rows "
            f"in {runs[traj[row]]} separate runs of the batch; without `steps`, each trajectory's rows must be "
            "contiguous and in step order (verl-agent's rollout output). After adjust_batch/_balance_batch, pass "
            "steps=trajectory_steps(traj_uid) recorded on the rollout output"
        )
    return _rank_in_batch_order(traj, n_trajs) + 1


def _check_copies(
    row_of: np.ndarray, kept: np.ndarray, columns: dict[str, np.ndarray], returns_to_go: np.ndarray,
    scores: np.ndarray,
) -> None:
    """Rows sharing (trajectory, step) must be copies of one row (as ``adjust_batch(mode="copy")`` makes)."""
    source = kept[row_of]
    same = (returns_to_go == returns_to_go[source]) & (scores == scores[source])
    for name in ("anchor_obs", "action_keys"):
        same &= np.fromiter(
            (a == b for a, b in zip(columns[name], columns[name][source], strict=True)), dtype=bool, count=len(source)
        )
    if not same.all():
        row = int(np.flatnonzero(~same)[0])
        raise ValueError(
            f"batch rows {int(source[row])} and {row} have the same (index, traj_index, step) but differ "
            "(step_rewards, episode score, anchor_obs or action_keys): steps must identify a trajectory's rows"
        )


def _per_step_rewards(
    returns_to_go: np.ndarray, traj: np.ndarray, step: np.ndarray, columns: dict[str, np.ndarray],
    kept: np.ndarray, gamma: float,
) -> np.ndarray:
    """``r_t = G_t - gamma G_{t+1}`` on rows sorted by (trajectory, step), after checking steps are 1..T."""
    run_start = np.r_[True, traj[1:] != traj[:-1]]
    expected = np.arange(len(traj)) - np.maximum.accumulate(np.where(run_start, np.arange(len(traj)), 0)) + 1
    if not np.array_equal(step, expected):
        row = int(np.flatnonzero(step != expected)[0])
        source = int(kept[row])
        held = step[traj == traj[row]].tolist()
        raise ValueError(
            f"trajectory (index={shown(columns['index'][source])}, traj_index={shown(columns['traj_index'][source])}) must "
            f"have steps exactly 1..T, it has {held} (adjust_batch(mode='delete') drops rows; use mode='copy')"
        )
    next_return = np.r_[np.where(run_start[1:], 0.0, returns_to_go[1:]), 0.0]
    return returns_to_go - gamma * next_return


def _check_scores(
    scores: np.ndarray, rewards: np.ndarray, traj: np.ndarray, n_trajs: int, columns: dict[str, np.ndarray],
    kept: np.ndarray, gamma: float,
) -> None:
    """Every row's episode score must be its trajectory's ``R_i = sum_t r_t`` (one reward sequence per trajectory)."""
    episode_return = np.bincount(traj, weights=rewards, minlength=n_trajs)[traj]
    ok = np.isclose(scores, episode_return, rtol=1e-5, atol=SCORE_TOLERANCE)
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        source = int(kept[row])
        raise ValueError(
            f"row {source} (index={shown(columns['index'][source])}, traj_index={shown(columns['traj_index'][source])}) has "
            f"episode score token_level_rewards.sum(-1) = {scores[row]:.6g}, but its step_rewards with "
            f"gamma={gamma} give R = sum_t r_t = {episode_return[row]:.6g}. Pass the gamma verl-agent used "
            "(algorithm.gamma); verl-agent's per-row invalid-action penalty and KL-in-reward are not per-step "
            "rewards: put the penalty into the environment's step reward instead (examples/verl_agent/README.md)"
        )


__all__ = ["GIGPO_MODES", "compute_ecpo_outcome_advantage", "trajectory_steps"]
