"""Adapter that makes any ``ecpo_gym`` text environment usable by RLlib's env runners.

RLlib corrupts ``spaces.Text`` observations (a string arrives as its first character), so text never
travels in RLlib spaces here. The adapter turns each state into one fixed-shape float vector and the
action into an index over the state's admissible actions:

- observation ``Box(-1, 1, (D + K*D + K,))``: ``[context | candidate_0 .. candidate_{K-1} | mask]``, where
  ``context`` hashes the task instruction and the observation text into ``D`` dims, ``candidate_k`` hashes
  the ``k``-th admissible action, and ``mask[k] = 1`` where candidate ``k`` exists;
- action ``Discrete(K)``: the index of the admissible action to take. An index without a candidate is
  sent to the text env as an empty string, i.e. an invalid action (reward ``reward_invalid``);
- ``info`` keeps the text env's keys (``state_key``, ``action_key``, ``task_id``, ...) and adds
  ``group_key`` (a string unique per group across env runners), ``group_copy`` (0..N-1) and
  ``candidates`` (the admissible actions the indices refer to).

Each task is played for ``group_size`` consecutive resets, so an env runner that samples ``k * N``
complete episodes from one env returns ``k`` complete groups of ``N`` trajectories of the same task.
States with more than ``K`` admissible actions expose the first ``K`` (``info["candidates_dropped"]``
counts the rest).

This module imports gymnasium and numpy only (no ray): ``CandidateActionEnv(config)`` is also a plain
Gymnasium env.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

_WORD = re.compile(r"[a-z0-9]+")


def hashed_text_features(text: str, dim: int, *, prefix: str = "") -> np.ndarray:
    """Signed feature hashing of ``text``'s lower-cased words plus one bucket for the whole string.

    CRC32 (not Python's salted ``hash``) keeps features identical across processes and runs. The vector
    is L2-normalised so every entry lies in [-1, 1].
    """
    vector = np.zeros(dim, dtype=np.float32)
    lowered = text.lower()
    tokens = [f"{prefix}w:{w}" for w in _WORD.findall(lowered)]
    tokens.append(f"{prefix}s:{' '.join(_WORD.findall(lowered))}")
    for token in tokens:
        h = zlib.crc32(token.encode("utf-8"))
        vector[h % dim] += 1.0 if (h >> 31) & 1 else -1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


class CandidateActionEnv(gym.Env[np.ndarray, np.int64]):
    """A text env seen through fixed-shape candidate features, repeating each task for N resets.

    ``config`` keys (RLlib passes ``env_config`` here as an ``EnvContext``):
    ``env_id`` (registered id, or a callable returning a text env), ``env_kwargs``, ``group_size`` (N),
    ``max_candidates`` (K, default 16), ``feature_dim`` (D, default 64), ``task_ids`` (optional pool to
    draw tasks from; default: the env's whole list) and ``seed`` (base of the task stream).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, config: Mapping[str, Any] | None = None, **overrides: Any) -> None:
        cfg = {**dict(config or {}), **overrides}
        if "env_id" not in cfg:
            raise ValueError("CandidateActionEnv needs config['env_id'] (e.g. 'ecpo/DivergentAnchor-v0')")
        self.group_size = int(cfg.get("group_size", 8))
        self.max_candidates = int(cfg.get("max_candidates", 16))
        self.feature_dim = int(cfg.get("feature_dim", 64))
        if self.group_size < 1 or self.max_candidates < 1 or self.feature_dim < 2:
            raise ValueError(
                f"need group_size >= 1, max_candidates >= 1, feature_dim >= 2; got {self.group_size}, "
                f"{self.max_candidates}, {self.feature_dim}"
            )
        self.text_env = _make_text_env(cfg["env_id"], dict(cfg.get("env_kwargs") or {}))
        pool = cfg.get("task_ids")
        self.task_pool = [str(t) for t in (pool if pool is not None else self.text_env.unwrapped.task_ids)]
        if not self.task_pool:
            raise ValueError(f"environment {cfg['env_id']!r} has no task ids to draw groups from")
        # EnvContext carries the runner's index: runners draw different task streams and group keys.
        self.worker_index = int(getattr(config, "worker_index", 0) or 0)
        self.vector_index = int(getattr(config, "vector_index", 0) or 0)
        self._base_seed = cfg.get("seed")
        self._task_rng: np.random.Generator | None = None
        self._groups_started = 0
        self._copy = self.group_size  # forces a new group on the first reset
        self._group_task: str | None = None
        self._group_seed = 0
        self._candidates: list[str] = []
        d, k = self.feature_dim, self.max_candidates
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(d + k * d + k,), dtype=np.float32)
        self.action_space = spaces.Discrete(k)

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # RLlib re-seeds on every `sample(num_episodes=...)` call; only the first seed starts the task
        # stream, otherwise every iteration would replay the same tasks.
        super().reset(seed=seed if self._task_rng is None else None)
        if self._task_rng is None:
            base = self._base_seed if self._base_seed is not None else seed
            entropy = [int(base) if base is not None else 0, self.worker_index, self.vector_index]
            self._task_rng = np.random.default_rng(entropy)
        options = dict(options or {})
        forced_task = options.pop("task_id", None)
        if forced_task is not None or self._copy >= self.group_size:
            self._start_group(forced_task)
        copy = self._copy
        self._copy += 1
        obs_text, info = self.text_env.reset(seed=self._group_seed + copy,
                                             options={"task_id": self._group_task, **options})
        return self._observe(obs_text, info, copy)

    def step(self, action: Any):
        try:
            index = int(action)
        except (TypeError, ValueError):
            index = -1
        text = self._candidates[index] if 0 <= index < len(self._candidates) else ""
        obs_text, reward, terminated, truncated, info = self.text_env.step(text)
        obs, info = self._observe(obs_text, info, self._copy - 1)
        info["action_text"] = text
        return obs, float(reward), bool(terminated), bool(truncated), info

    def close(self) -> None:
        self.text_env.close()
        super().close()

    # ------------------------------------------------------------------ helpers
    @property
    def group_key(self) -> str:
        return f"w{self.worker_index}v{self.vector_index}g{self._groups_started - 1}"

    def _start_group(self, task_id: str | None) -> None:
        assert self._task_rng is not None
        if task_id is None:
            task_id = self.task_pool[int(self._task_rng.integers(len(self.task_pool)))]
        self._group_task = str(task_id)
        self._group_seed = int(self._task_rng.integers(2**31 - 1 - self.group_size))
        self._groups_started += 1
        self._copy = 0

    def _observe(self, obs_text: str, info: dict[str, Any], copy: int) -> tuple[np.ndarray, dict[str, Any]]:
        admissible = [str(a) for a in info.get("admissible_actions", [])]
        self._candidates = admissible[: self.max_candidates]
        info = dict(info)
        info.update(group_key=self.group_key, group_copy=copy, candidates=list(self._candidates),
                    candidates_dropped=len(admissible) - len(self._candidates))
        return self.encode(obs_text, str(info.get("task", "")), self._candidates), info

    def encode(self, observation: str, task: str, candidates: list[str]) -> np.ndarray:
        """The flat observation vector ``[context | candidates | mask]`` (see the module docstring)."""
        d, k = self.feature_dim, self.max_candidates
        out = np.zeros(d + k * d + k, dtype=np.float32)
        context = hashed_text_features(observation, d) + hashed_text_features(task, d, prefix="task:")
        norm = float(np.linalg.norm(context))
        out[:d] = context / norm if norm > 0 else context
        for j, candidate in enumerate(candidates[:k]):
            out[d + j * d: d + (j + 1) * d] = hashed_text_features(candidate, d, prefix="act:")
            out[d + k * d + j] = 1.0
        return out


def split_observation(obs: Any, feature_dim: int, max_candidates: int):
    """Inverse of ``CandidateActionEnv.encode`` on a batch ``[B, D + K*D + K]``: (context, candidates, mask)."""
    d, k = feature_dim, max_candidates
    context = obs[..., :d]
    candidates = obs[..., d: d + k * d].reshape(*obs.shape[:-1], k, d)
    mask = obs[..., d + k * d:]
    return context, candidates, mask


def layout_from_space(obs_dim: int, num_actions: int) -> tuple[int, int]:
    """Recover ``(feature_dim, max_candidates)`` from the observation size and ``Discrete(K)``."""
    k = int(num_actions)
    d, rest = divmod(int(obs_dim) - k, k + 1)
    if rest or d < 1:
        raise ValueError(f"observation size {obs_dim} does not match the layout D + K*D + K with K={k}")
    return d, k


def _make_text_env(env: str | Callable[..., gym.Env], env_kwargs: dict[str, Any]) -> gym.Env:
    if callable(env):
        return env(**env_kwargs)
    import ecpo_gym  # noqa: F401  (registers the ecpo/ ids)

    return gym.make(str(env), disable_env_checker=True, **env_kwargs)
