"""What both RLlib algorithms share: PPO's ``Algorithm`` with checkpoint paths taken from the working directory and
a resource request refused, in one line, when it can never fit the running Ray cluster.

The LLM algorithm (``llm/config.py``, ``ECPO``) and the classic-RL example (``candidate/config.py``,
``CandidateECPO``) subclass ``GroupCreditAlgorithm``.
"""

from __future__ import annotations

import os
from typing import Any

import ray
from ray.rllib.algorithms.ppo import PPO


class GroupCreditAlgorithm(PPO):
    """PPO's ``Algorithm`` with the surface both ECPO algorithms share (see the module docstring)."""

    def save_to_path(self, path=None, *args, **kwargs):
        """RLlib's ``save_to_path``; a relative local path is taken from the working directory (pyarrow,
        underneath, refuses a path without a scheme)."""
        return super().save_to_path(_absolute(path), *args, **kwargs)

    @classmethod
    def from_checkpoint(cls, path, *args, **kwargs):
        """RLlib's ``from_checkpoint``; a relative local path is taken from the working directory."""
        return super().from_checkpoint(_absolute(path), *args, **kwargs)

    @classmethod
    def default_resource_request(cls, config):
        """RLlib's request (what Tune reserves for a trial), refused with one line when it can never fit Ray's
        cluster: Tune would keep the trial PENDING forever."""
        request = super().default_resource_request(config)
        check_fits_cluster(request.bundles, "this trial")
        return request


def _absolute(path: Any) -> Any:
    """A local relative path made absolute; ``None``, URIs (``s3://...``) and absolute paths as given."""
    if path is None or "://" in str(path):
        return path
    return os.path.abspath(os.path.expanduser(str(path)))


def check_fits_cluster(bundles: list[dict[str, float]], what: str) -> None:
    """``ValueError`` naming the resource when ``bundles`` (RLlib's requests: the driver's first, then one per
    actor) ask more CPUs or GPUs than the running Ray cluster has in all; nothing when Ray is not started yet."""
    if not ray.is_initialized():
        return
    available = ray.cluster_resources()
    for resource, setting in (("CPU", "num_cpus_per_env_runner / num_cpus_per_learner"),
                              ("GPU", "num_gpus_per_env_runner / num_gpus_per_learner")):
        needed = sum(float(b.get(resource, 0.0)) for b in bundles)
        have = float(available.get(resource, 0.0))
        if needed > have:
            raise ValueError(f"{what} needs {needed:g} {resource}s ({float(bundles[0].get(resource, 0)):g} for the "
                             f"driver, the rest for {len(bundles) - 1} actors) and the Ray cluster has {have:g}: lower "
                             f"num_env_runners, num_learners or {setting}, or add nodes")
