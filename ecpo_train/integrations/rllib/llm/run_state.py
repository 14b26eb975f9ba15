"""What the ``ECPO`` algorithm keeps of its run beside RLlib's own state, in one object (``algo.ecpo``).

The run's ``TrainConfig``, the driver's generator (the native trainer's task/seed/shuffle stream), the iteration
(the version of the learner's weights), the training and validation tasks, TIGPO's task memory, the groups
dispatched for the next iteration (``max_policy_lag=1``), the last validation's episodes and the run shell's
``observe`` hook. The sampler and the learner of an iteration are handed what they need of it (``step.py``); none
holds the algorithm. :meth:`ECPOState.state_dict` is what a checkpoint keeps of it (``ECPO.get_state``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ecpo_train.core.task_memory import TaskGraphMemory, task_memory_for
from ecpo_train.core.tasks import task_lists


@dataclass
class ECPOState:
    """One ECPO run's state on the driver (see the module docstring)."""

    train_config: Any  # the run's TrainConfig
    rng: np.random.Generator  # the native trainer's task/seed/shuffle stream
    train_tasks: list[str]
    val_tasks: list[str]
    memory: TaskGraphMemory | None  # tigpo's task graphs and revisit schedule (None: the estimator keeps none)
    iteration: int = 0
    dispatched: Any = None  # max_policy_lag=1: the next iteration's groups (pipeline.Dispatched)
    validation_episodes: list[Any] = field(default_factory=list)  # the last validation's (run_dir.EpisodeOutcome)
    observe: Any = None  # core.iteration.run_iteration's observe(sampled, learned) hook (the run shell's)

    @classmethod
    def start(cls, train: Any, env_task_ids: list[str]) -> ECPOState:
        """A fresh run of ``train`` on an environment with tasks ``env_task_ids`` (a bad task choice: one line)."""
        rng = np.random.default_rng(train.seed)
        memory = task_memory_for(train)
        train_tasks, val_tasks = task_lists(train, env_task_ids)
        return cls(train, rng, train_tasks, val_tasks, memory)

    def state_dict(self, runner_rng: dict[int, Any]) -> dict[str, Any]:
        """What a checkpoint keeps (``runner_rng``: every runner's sampling streams): the generator, the iteration,
        the pending groups' tasks and env seed (not their rows: a restored run plays them again) and the memory."""
        pending = self.dispatched
        return {"rng": self.rng.bit_generator.state, "iteration": self.iteration, "runner_rng": runner_rng,
                "pending": None if pending is None else [pending.task_ids, pending.env_seed],
                "task_memory": None if self.memory is None else self.memory.state_dict()}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """:meth:`state_dict`'s generator, iteration and memory back (the caller replaces the pending groups and
        the runners' streams, which need the runners)."""
        self.rng.bit_generator.state = saved["rng"]
        self.iteration = int(saved["iteration"])
        if self.memory is not None:
            if saved.get("task_memory") is None:
                raise ValueError("the checkpoint keeps no task memory, which estimator="
                                 f"{self.train_config.estimator} continues from")
            self.memory = TaskGraphMemory.from_state(saved["task_memory"])
