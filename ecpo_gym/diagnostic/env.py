"""Divergent-anchor MDPs: a corridor of repeated anchor rooms with one reliable exit and rare lucky ones.

Each task is a corridor of ``depth`` rooms. In every room the agent sees ``branching`` doors. One door is
the *good* action: it leads to the next room with probability ``good_prob``. Every other door is a *rare*
action whose downstream success is stochastic: with its own recovery probability (drawn once per task
and room from ``rare_prob``) the agent scrambles back into the next room (a "lucky" recovery), otherwise
it falls into a pit and the episode ends in failure. ``noise`` is a per-step hazard that sends any move
to the pit, adding within-action return noise that no action can avoid. Leaving the last room wins.

Because every rollout of a group walks the same corridor, each room is an anchor state revisited across
rollouts, exactly the setting of the paper's divergent-anchor bias (fig. 1, App. C): a frequent good door
with imperfect downstream success next to rare doors that sometimes succeed by luck. Room ``k`` (0-based)
is always entered at step ``k + 1``, so with the default ``depth=12`` anchors at depth >= 7 exist and pass
the paper's StrictValid depth test (``d_min = 7``).

The exact transition model is exposed by :meth:`DivergentAnchorEnv.transition_model` so action values can
be computed by dynamic programming (``ecpo_gym.diagnostic.dp``) and checked against rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ecpo_gym.core import (
    MAX_STEPS,
    REWARD_FAILURE,
    REWARD_INVALID,
    REWARD_SUCCESS,
    TaskStart,
    TextAgentEnv,
    Transition,
    UnknownTaskError,
)
from ecpo_gym.kwargs import check_int, check_optional_int, check_pair, check_real, shown

DOOR_NAMES = ("red", "blue", "green", "gold", "grey", "pink", "teal", "white", "black", "brown")
GOAL = "goal"
MAX_DEPTH = 10_000  # rooms per corridor
MAX_ROOMS = 100_000  # rooms over every corridor (depth x num_tasks): all layouts are built (~2 s) when the env is made
PIT = "pit"


@dataclass(frozen=True)
class Outcome:
    """One branch of a transition: ``prob`` of moving to ``next_state`` with ``reward``."""

    prob: float
    next_state: str
    reward: float
    terminated: bool
    won: bool


@dataclass(frozen=True)
class CorridorLayout:
    """One task: which door is good in each room and every door's probability of reaching the next room."""

    task_id: str
    doors: tuple[tuple[str, ...], ...]  # doors[k] = the door actions of room k, in display order
    advance_prob: tuple[tuple[float, ...], ...]  # advance_prob[k][j] = P(next room | room k, door j)
    good_door: tuple[int, ...]  # index of the good door in each room


def room_key(task_id: str, room: int) -> str:
    return f"{task_id}:room{room}"


class DivergentAnchorEnv(TextAgentEnv):
    """Corridor MDP with repeated anchor rooms, one frequent good door and rare lucky doors.

    Parameters: ``depth`` (rooms per corridor), ``branching`` (doors per room, 2..10), ``good_prob``
    (P(next room) through the good door), ``rare_prob`` (``(low, high)`` range the rare doors' recovery
    probabilities are drawn from, once per task), ``noise`` (per-step pit hazard for every door),
    ``num_tasks`` and ``layout_seed`` (the task layouts are a deterministic function of these),
    ``max_steps`` (default ``2 * depth``: invalid actions use up steps) and the paper's rewards.
    """

    def __init__(
        self,
        *,
        depth: int = 12,
        branching: int = 3,
        good_prob: float = 0.97,
        rare_prob: tuple[float, float] = (0.6, 0.85),
        noise: float = 0.0,
        num_tasks: int = 8,
        layout_seed: int = 0,
        max_steps: int | None = None,
        reward_success: float = REWARD_SUCCESS,
        reward_failure: float = REWARD_FAILURE,
        reward_invalid: float = REWARD_INVALID,
        render_mode: str | None = None,
    ) -> None:
        # every layout is built here, so the corridor's size is bounded: a typo like depth=100000000 is refused
        # at gym.make instead of building for minutes
        depth = check_int("depth", depth, 1, MAX_DEPTH)
        branching = check_int("branching", branching, 2, len(DOOR_NAMES))
        num_tasks = check_int("num_tasks", num_tasks, 1, MAX_ROOMS)
        if depth * num_tasks > MAX_ROOMS:
            raise ValueError(f"depth={depth} x num_tasks={num_tasks} rooms is invalid: at most {MAX_ROOMS} rooms "
                             "are built")
        good_prob, noise = check_real("good_prob", good_prob, 0.0, 1.0), check_real("noise", noise, 0.0, 1.0)
        low, high = check_pair("rare_prob", rare_prob, 0.0, 1.0)
        layout_seed = check_int("layout_seed", layout_seed, 0)
        max_steps = check_optional_int("max_steps", max_steps, 1, MAX_STEPS)
        for name, reward in (("reward_success", reward_success), ("reward_failure", reward_failure),
                             ("reward_invalid", reward_invalid)):
            check_real(name, reward)
        super().__init__(
            max_steps=2 * depth if max_steps is None else max_steps,
            reward_success=reward_success,
            reward_failure=reward_failure,
            reward_invalid=reward_invalid,
            render_mode=render_mode,
            max_text_length=256,
        )
        self.depth = int(depth)
        self.branching = int(branching)
        self.good_prob = float(good_prob)
        self.rare_prob = (low, high)
        self.noise = float(noise)
        self.layout_seed = int(layout_seed)
        self._task_ids = tuple(f"corridor{i}" for i in range(num_tasks))
        self._layouts = {tid: self._make_layout(tid, i) for i, tid in enumerate(self._task_ids)}
        self._layout: CorridorLayout | None = None
        self._position: int | str = 0  # room index, GOAL or PIT

    # ------------------------------------------------------------------ layouts
    def _make_layout(self, task_id: str, index: int) -> CorridorLayout:
        rng = np.random.default_rng([self.layout_seed, index])
        doors, probs, good = [], [], []
        for _ in range(self.depth):
            names = rng.choice(len(DOOR_NAMES), size=self.branching, replace=False)
            good_index = int(rng.integers(self.branching))
            room_probs = rng.uniform(self.rare_prob[0], self.rare_prob[1], size=self.branching)
            room_probs[good_index] = self.good_prob
            doors.append(tuple(f"open {DOOR_NAMES[n]} door" for n in names))
            probs.append(tuple(float(p) for p in room_probs))
            good.append(good_index)
        return CorridorLayout(task_id, tuple(doors), tuple(probs), tuple(good))

    def layout(self, task_id: str) -> CorridorLayout:
        try:
            return self._layouts[task_id]
        except KeyError:
            raise UnknownTaskError(f"unknown task_id {shown(task_id)}; this env has {list(self._task_ids)}") from None

    # ------------------------------------------------------------------ exact model
    def initial_state(self, task_id: str) -> str:
        self.layout(task_id)
        return room_key(task_id, 0)

    def transition_model(self, task_id: str) -> dict[str, dict[str, list[Outcome]]]:
        """The exact MDP of ``task_id``: ``state_key -> action -> [Outcome, ...]`` (terminal states absent).

        Probabilities of each action's outcomes sum to one; the keys are the env's ``state_key`` and
        admissible action strings, so DP values line up with what rollouts report in ``info``.
        """
        layout = self.layout(task_id)
        model: dict[str, dict[str, list[Outcome]]] = {}
        for room in range(self.depth):
            last = room == self.depth - 1
            succeed_state = f"{task_id}:{GOAL}" if last else room_key(task_id, room + 1)
            succeed_reward = self.reward_success if last else 0.0
            actions: dict[str, list[Outcome]] = {}
            for door, p_next in zip(layout.doors[room], layout.advance_prob[room]):
                p = p_next * (1.0 - self.noise)
                actions[door] = [
                    Outcome(p, succeed_state, succeed_reward, last, last),
                    Outcome(1.0 - p, f"{task_id}:{PIT}", self.reward_failure, True, False),
                ]
            model[room_key(task_id, room)] = actions
        return model

    # ------------------------------------------------------------------ TextAgentEnv hooks
    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    def _load_task(self, task_id: str) -> TaskStart:
        self._layout = self.layout(task_id)
        self._position = 0
        return TaskStart(
            observation=self._room_text(),
            task=self.state_view(room_key(task_id, 0))["task"],
            task_type="divergent_anchor",
        )

    def _admissible_actions(self) -> list[str]:
        if isinstance(self._position, int):
            assert self._layout is not None
            return list(self._layout.doors[self._position])
        return []

    def _state_key(self) -> str:
        assert self._layout is not None
        if isinstance(self._position, int):
            return room_key(self._layout.task_id, self._position)
        return f"{self._layout.task_id}:{self._position}"

    def _execute(self, command: Any) -> Transition:
        assert self._layout is not None and isinstance(self._position, int)
        room = self._position
        door = self._layout.doors[room].index(command)
        p_next = self._layout.advance_prob[room][door] * (1.0 - self.noise)
        is_good = door == self._layout.good_door[room]
        if self.np_random.random() < p_next:
            if room == self.depth - 1:
                self._position = GOAL
                return Transition("you are out. you win.", terminated=True, won=True,
                                  metrics={"good_action": is_good})
            self._position = room + 1
            return Transition(self._room_text(), metrics={"good_action": is_good})
        self._position = PIT
        return Transition("you fell into a pit.", terminated=True, won=False, metrics={"good_action": is_good})

    def _room_text(self) -> str:
        assert self._layout is not None and isinstance(self._position, int)
        return self._describe_room(self._layout, self._position)

    def _describe_room(self, layout: CorridorLayout, room: int) -> str:
        doors = ", ".join(d.split()[1] for d in layout.doors[room])
        return f"room {room + 1}/{self.depth}. doors: {doors}."

    def expert_plan(self) -> list[str]:
        """The good door of every room of the current corridor, in order (room ``k`` is entered at step ``k``).

        What the leaderboard's ``ExpertAgent`` plays and ``ecpo sft`` imitates: it wins with probability
        ``(good_prob * (1 - noise)) ** depth``. Empty before the first reset.
        """
        if self._layout is None:
            return []
        return [doors[good] for doors, good in zip(self._layout.doors, self._layout.good_door)]

    def state_view(self, state_key: str) -> dict[str, Any]:
        """What an agent sees in the non-terminal state ``state_key`` of :meth:`transition_model` when it got there
        without invalid actions: ``task``, ``observation``, ``step`` (steps taken: room k is entered at step k) and
        ``admissible_actions``. Lets a policy's exact success be computed by DP without playing episodes."""
        task_id, _, room_text = state_key.rpartition(":room")
        layout, room = self.layout(task_id), int(room_text)
        return {"task": f"walk through all {self.depth} rooms", "observation": self._describe_room(layout, room),
                "step": room, "admissible_actions": list(layout.doors[room])}


class DivergentAnchorNoisyEnv(DivergentAnchorEnv):
    """Same corridor with a 2% per-step hazard: within-action noise dominates more anchors (VarGate's case)."""

    def __init__(self, *, noise: float = 0.02, **kwargs: Any) -> None:
        super().__init__(noise=noise, **kwargs)


class DivergentAnchorWideEnv(DivergentAnchorEnv):
    """Five doors per room: more rare actions, so more singleton (divergent) evidence per anchor."""

    def __init__(self, *, branching: int = 5, rare_prob: tuple[float, float] = (0.7, 0.9), **kwargs: Any):
        super().__init__(branching=branching, rare_prob=rare_prob, **kwargs)
