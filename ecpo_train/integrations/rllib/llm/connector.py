"""The LLM algorithm's learner connector piece: the sampled step-row tables -> ``credit.compute_advantages``."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.evaluation.postprocessing import Postprocessing

from ecpo_train.core.batch import TrajectoryBatch
from ecpo_train.core.iteration import credit_step

# The learner results' key of the credit diagnostics, each under its own name (core.iteration.iteration_metrics
# names them credit/<name> in the iteration's metrics, for both engines)
CREDIT_RESULTS = "credit"
# ... and of the credit step's seconds (the iteration's ``time/credit``, outside ``time/update`` as on the native path)
CREDIT_SECONDS = "credit_seconds"


class StepTableCredit(ConnectorV2):
    """Learner connector of the LLM path: the sampled step-row tables -> ``credit.compute_advantages``.

    Its "episodes" are ``TrajectoryBatch`` tables (whole groups, from ``LLMEnvRunner.sample_groups``): they are
    joined, every group is checked to hold ``group_size`` trajectories (a partial group never reaches credit),
    and the run's estimator gives the advantages through the native credit step (``core.iteration.credit_step``,
    on the table's coded rows; on a CUDA learner with the rewards on its device). ``train_config`` is the run's
    ``TrainConfig`` (estimator, credit settings, group size). The batch it returns holds the table and its
    advantages for the learner's update; the credit diagnostics are logged under :data:`CREDIT_RESULTS` by their
    own names (counts summed over learners, the rest averaged).
    """

    def __init__(self, input_observation_space=None, input_action_space=None, *, train_config: Any,
                 module_id: str = "default_policy", **kwargs):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.train_config = train_config
        self.group_size = int(train_config.group_size)
        self.module_id = module_id

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, metrics=None, **kwargs):
        tables = list(episodes)
        if not tables or not all(isinstance(t, TrajectoryBatch) for t in tables):
            raise TypeError("StepTableCredit takes the sampled TrajectoryBatch tables (LLMEnvRunner.sample_groups)")
        table = TrajectoryBatch.concat(tables)
        sizes = table_group_sizes(table)
        partial = {g: n for g, n in sizes.items() if n != self.group_size}
        if partial:
            raise ValueError(f"ECPO needs complete groups of {self.group_size} trajectories; got sizes {partial}")
        device = getattr(rl_module, "device", None) if rl_module is not None else None
        started = time.perf_counter()
        advantages, diagnostics = credit_step(self.train_config, table, device=device)
        batch[self.module_id] = {"table": table, Postprocessing.ADVANTAGES: np.asarray(advantages, np.float64)}
        if metrics is not None:
            metrics.log_value((self.module_id, CREDIT_SECONDS), time.perf_counter() - started, window=1)
            for name, value in diagnostics.items():
                if np.isscalar(value) and np.isfinite(float(value)):
                    reduce = "sum" if str(name).startswith("num_") else "mean"
                    metrics.log_value((self.module_id, CREDIT_RESULTS, str(name)), float(value), reduce=reduce,
                                      window=1)
        return batch


def table_group_sizes(table: TrajectoryBatch) -> dict[Any, int]:
    """How many trajectories each group of a step-row table holds."""
    trajectories = {(g, t) for g, t in zip(table.group_id, table.traj_id)}
    sizes: dict[Any, int] = {}
    for group, _ in trajectories:
        sizes[group] = sizes.get(group, 0) + 1
    return sizes
