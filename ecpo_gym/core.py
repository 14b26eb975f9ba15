"""The ``TextAgentEnv`` contract that every ECPO environment follows (``docs/ARCHITECTURE.md``).

An environment here is only the game: its state, its admissible actions, the canonical form of an
action and the reward. Prompts live in ``prompts/`` and response parsing in the policy. Subclasses
provide five hooks (``task_ids``, ``_load_task``, ``_admissible_actions``, ``_state_key``, ``_execute``)
and may override ``parse_action`` when their actions are open-ended (search-QA).

Every ``reset`` and ``step`` returns an ``info`` with ``task_id``, ``task``, ``task_type``, ``state_key``,
``observation_key``, ``admissible_actions`` and ``step``; a step adds ``action_key``,
``is_action_valid`` and ``won`` plus the environment's own metrics. ``step`` never raises on any input:
text that matches no admissible action is an invalid action (reward ``reward_invalid``, state unchanged).
"""

from __future__ import annotations

import abc
import multiprocessing as mp
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils.shared_memory import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

from ecpo_gym.canonical import INVALID_ACTION, ActionCanonicalizer, normalize_text
from ecpo_gym.kwargs import check_count, check_real, shown

RESET_OPTIONS = ("task_id",)  # the keys reset(options=...) reads

MAX_TEXT_LENGTH = 1 << 20
# Every environment's step limit is at most this (the base class checks it, so no id or constructor can skip it): an
# episode must end, and the credit's dense per-step tables are sized by the longest one. The diagnostic corridors'
# 10,000 rooms with invalid steps to spare are the longest episode an id declares.
MAX_STEPS = 100_000
# The paper's rewards (ALFWorld, WebShop, the diagnostic corridors): the one home of these defaults; search-QA
# declares its own scale (1 for a correct answer, -0.01 for an invalid turn).
REWARD_SUCCESS, REWARD_FAILURE, REWARD_INVALID = 10.0, 0.0, -0.1
_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "


class AnyText(spaces.Text):
    """A ``Text`` space that contains every ``str`` up to ``max_length`` characters.

    Gymnasium's ``Text`` checks each character against an alphanumeric charset; real observations carry
    punctuation, newlines and unicode, so membership here only checks type and length. Sampling draws
    printable ASCII, which is what ``check_env`` and fuzzers feed to ``step``.
    """

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, *, sample_length: int = 64, seed: Any = None):
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARSET, seed=seed)
        self.sample_length = sample_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            length = int(self.np_random.integers(0, self.sample_length + 1))
            return super().sample(mask=(length, None))
        return super().sample(mask=mask, probability=probability)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyText) and other.max_length == self.max_length


# Gymnasium's AsyncVectorEnv passes observations through shared memory, which for a Text space holds each character's
# index in the space's charset (real observations, with newlines and unicode, are not in it) and is read once, when
# the vector env starts (a tuple of str, unlike an array, is no view). An AnyText holds, per copy, its length and its
# characters' code points, and reads them as a view (``SharedTexts``), so every vectorization mode carries any text.
class SharedTexts(Sequence):
    """The texts of a vector env's shared memory, read when indexed (a view, as Gymnasium's arrays are); a copy
    (what the vector env returns unless ``copy=False``) is a tuple of str."""

    def __init__(self, space: AnyText, memory: Any, n: int) -> None:
        self._rows = np.frombuffer(memory.get_obj(), dtype=np.int32).reshape(n, space.max_length + 1)

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._rows[index]
        return row[1:1 + row[0]].tobytes().decode("utf-32-le", "surrogatepass")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __deepcopy__(self, memo: Any) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return repr(tuple(self))


@create_shared_memory.register(AnyText)
def _create_any_text_memory(space: AnyText, n: int = 1, ctx: Any = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@write_to_shared_memory.register(AnyText)
def _write_any_text(space: AnyText, index: int, value: str, shared_memory: Any) -> None:
    codes = np.frombuffer(str(value).encode("utf-32-le", "surrogatepass"), dtype=np.int32)
    if len(codes) > space.max_length:
        raise ValueError(f"an observation of {len(codes)} characters is longer than its space holds "
                         f"({space.max_length})")
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * (space.max_length + 1):]
    row[0] = len(codes)
    row[1:1 + len(codes)] = codes


@read_from_shared_memory.register(AnyText)
def _read_any_text(space: AnyText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


class UnknownTaskError(KeyError, ValueError):
    """``reset(options={"task_id": ...})`` named a task this environment does not have.

    One type on every environment; a ``KeyError`` and a ``ValueError`` both, so code written against either
    keeps catching it. The message is printed as written (``KeyError`` would print its repr).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass
class TaskStart:
    """What ``_load_task`` returns: the first observation and the task's description."""

    observation: str
    task: str
    task_type: str = ""
    extra_info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Transition:
    """What ``_execute`` returns for a valid action."""

    observation: str
    terminated: bool = False
    won: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    reward: float | None = None  # the env's own reward for this step; None: the success/failure rule


class TextAgentEnv(gym.Env[str, str], abc.ABC):
    """Base class of every ECPO text environment (see the module docstring for the contract)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    canonicalizer: ClassVar[ActionCanonicalizer] = ActionCanonicalizer()
    invalid_feedback: ClassVar[str] = "Nothing happens."

    def __init__(
        self,
        *,
        max_steps: int,
        reward_success: float = REWARD_SUCCESS,
        reward_failure: float = REWARD_FAILURE,
        reward_invalid: float = REWARD_INVALID,
        render_mode: str | None = None,
        max_text_length: int = MAX_TEXT_LENGTH,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={shown(render_mode)}; supported: {self.metadata['render_modes']}")
        self.max_steps = check_count("max_steps", max_steps, 1, MAX_STEPS)
        # every env's rewards are finite numbers (a NaN or inf reward would poison every advantage of its group)
        self.reward_success = check_real("reward_success", reward_success)
        self.reward_failure = check_real("reward_failure", reward_failure)
        self.reward_invalid = check_real("reward_invalid", reward_invalid)
        self.render_mode = render_mode
        self.observation_space = AnyText(max_text_length)
        self.action_space = AnyText(max_text_length)
        self._task_id: str | None = None
        self._task_start: TaskStart | None = None
        self._closed = False
        self._observation = ""
        self._steps = 0
        self._done = False
        self._last_terminated = False
        self._last_truncated = False
        self._admissible_cache: list[str] | None = None
        self._action_table: dict[str, str] | None = None

    # ------------------------------------------------------------------ hooks for subclasses
    @property
    @abc.abstractmethod
    def task_ids(self) -> Sequence[str]:
        """Stable ids of every task this environment can reset to."""

    def _resolve_task_id(self, task_id: str) -> str:
        """The canonical id of ``task_id``; raises :class:`UnknownTaskError` for a task this env does not have.

        The default accepts exactly ``task_ids``; environments with aliases or open-ended ids override it.
        """
        if task_id not in self.task_ids:
            raise UnknownTaskError(f"unknown task_id {shown(task_id)} for {type(self).__name__} "
                                   f"({len(self.task_ids)} tasks, e.g. {list(self.task_ids[:3])})")
        return task_id

    def _sample_task_id(self) -> str:
        """The task of a ``reset`` without a ``task_id``: uniform over ``task_ids``, drawn from ``np_random``."""
        return self.task_ids[int(self.np_random.integers(len(self.task_ids)))]

    @abc.abstractmethod
    def _load_task(self, task_id: str) -> TaskStart:
        """Start the episode of ``task_id``; randomness must come from ``self.np_random``."""

    @abc.abstractmethod
    def _admissible_actions(self) -> list[str]:
        """The admissible actions of the current state."""

    @abc.abstractmethod
    def _state_key(self) -> str:
        """The canonical anchor key of the current state (paper App. A, anchor-state matching)."""

    @abc.abstractmethod
    def _execute(self, command: Any) -> Transition:
        """Apply a parsed, valid command (the second item ``parse_action`` returned)."""

    def _invalid_observation(self) -> str:
        """What the agent sees after an invalid action."""
        return self.invalid_feedback

    def _release(self) -> None:
        """Free engine resources (called by ``close``)."""

    # ------------------------------------------------------------------ action identity
    def admissible_actions(self) -> list[str]:
        """Admissible actions of the current state (cached until the state changes)."""
        if self._admissible_cache is None:
            self._admissible_cache = list(self._admissible_actions())
        return self._admissible_cache

    def parse_action(self, action: Any) -> tuple[str, Any]:
        """Return ``(action_key, command)``: the canonical action and what ``_execute`` receives.

        The default matches against the admissible set; an unmatched action is
        ``(INVALID_ACTION, None)``.
        """
        if self._action_table is None:
            self._action_table = self.canonicalizer.index(self.admissible_actions())
        key = self.canonicalizer(action, self._action_table)
        return key, (None if key == INVALID_ACTION else key)

    def canonical_action(self, action: Any) -> str:
        """``can(a)`` of the paper: the canonical action key, or ``"<invalid>"``."""
        return self.parse_action(action)[0]

    # ------------------------------------------------------------------ gymnasium API
    @staticmethod
    def _check_options(options: Any) -> dict[str, Any]:
        """``options`` as a dict (``None`` is empty); anything else, or a key other than ``task_id`` (a misspelt one
        would play a random task), is a ``TypeError`` that says what to pass."""
        if options is None:
            return {}
        if not isinstance(options, dict):
            raise TypeError(f"reset(options=...) takes a dict such as {{'task_id': ...}} or None, "
                            f"got {type(options).__name__}")
        unknown = [key for key in options if key not in RESET_OPTIONS]
        if unknown:
            raise TypeError(f"reset(options=...) reads only {', '.join(map(repr, RESET_OPTIONS))}; got "
                            f"{', '.join(shown(key) for key in unknown[:3])}{' ...' if len(unknown) > 3 else ''}")
        return options

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Start an episode of ``options["task_id"]`` (else a task drawn with ``np_random``).

        A reset that raises (an unknown task id: :class:`UnknownTaskError`; bad ``options``: ``TypeError``)
        first ends the previous episode, so ``step()`` then raises ``ResetNeeded`` instead of continuing it.
        """
        # a reset that raises leaves no half-reset episode behind: step() then asks for reset()
        self._task_start = None
        self._state_changed()
        options = self._check_options(options)
        super().reset(seed=seed)
        task_id = options.get("task_id")
        if task_id is None:
            if len(self.task_ids) == 0:
                raise RuntimeError(f"{type(self).__name__} has no tasks to reset to")
            task_id = self._sample_task_id()
        else:
            task_id = self._resolve_task_id(str(task_id))
        task_id = str(task_id)
        task_start = self._load_task(task_id)
        self._task_id, self._task_start, self._closed = task_id, task_start, False
        self._steps = 0
        self._done = False
        self._last_terminated = self._last_truncated = False
        self._observation = task_start.observation
        info = self._info()
        info["won"] = False
        info.update(task_start.extra_info)
        return self._observation, info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        if self._task_start is None:
            raise gym.error.ResetNeeded("call reset() before step()" if not self._closed else
                                        "the environment was closed: call reset() before step()")
        if self._done:
            info = self._info()
            info.update(action_key=INVALID_ACTION, is_action_valid=False, won=False,
                        error="the episode has ended; call reset()")
            return self._observation, 0.0, self._last_terminated, self._last_truncated, info
        try:
            action_key, command = self.parse_action(action)
        except Exception as exc:  # noqa: BLE001  (a parser must never turn bad text into a crash)
            action_key, command = INVALID_ACTION, None
            parse_error = f"{type(exc).__name__}: {exc}"
        else:
            parse_error = None
        self._steps += 1
        metrics: dict[str, Any] = {}
        if action_key == INVALID_ACTION:
            valid, won, terminated = False, False, False
            reward = self.reward_invalid
            self._observation = self._invalid_observation()
        else:
            transition = self._execute(command)
            self._state_changed()
            valid, won, terminated = True, bool(transition.won), bool(transition.terminated or transition.won)
            self._observation = transition.observation
            metrics = transition.metrics
            if transition.reward is not None:
                reward = transition.reward
            elif won:
                reward = self.reward_success
            elif terminated:
                reward = self.reward_failure
            else:
                reward = 0.0
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        self._last_terminated, self._last_truncated = terminated, truncated
        info = self._info()
        info.update(metrics)
        info.update(action_key=action_key, is_action_valid=valid, won=won)
        if parse_error is not None:
            info["error"] = parse_error
        return self._observation, float(reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._observation
        return None

    def close(self) -> None:
        """Free the engine and end the episode: ``step`` then asks for ``reset`` (which starts the engine again)."""
        self._release()
        self._task_start, self._closed = None, True
        self._state_changed()
        super().close()

    # ------------------------------------------------------------------ helpers
    @property
    def task_id(self) -> str | None:
        return self._task_id

    @property
    def observation(self) -> str:
        return self._observation

    @property
    def steps_taken(self) -> int:
        return self._steps

    def _state_changed(self) -> None:
        self._admissible_cache = None
        self._action_table = None

    def _info(self) -> dict[str, Any]:
        assert self._task_start is not None
        return {
            "task_id": self._task_id,
            "task": self._task_start.task,
            "task_type": self._task_start.task_type,
            "state_key": self._state_key(),
            "observation_key": normalize_text(self._observation),
            "admissible_actions": list(self.admissible_actions()),
            "step": self._steps,
        }
