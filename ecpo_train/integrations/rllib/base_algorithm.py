"""What an RLlib algorithm of group credit needs: PPO's ``Algorithm`` with checkpoint paths taken from the working directory and
a resource request refused, in one line, when it can never fit the running Ray cluster.

The LLM algorithm (``llm/config.py``, ``ECPO``) subclasses ``GroupCreditAlgorithm``, as the classic-RL example
outside the library does (``examples/rllib_candidate``).
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


def visible_gpus() -> float:
    """The GPUs the actors can be placed on: the running Ray cluster's, else this machine's (what ``ray.init()``
    would find: ``torch.cuda.device_count()``, which honours ``CUDA_VISIBLE_DEVICES``)."""
    if ray.is_initialized():
        return float(ray.cluster_resources().get("GPU", 0.0))
    import torch

    return float(torch.cuda.device_count())


def check_gpu_request(config: Any, gpus: float | None = None) -> None:
    """``ValueError`` (one line, before any actor starts) when the config's GPU requests cannot be placed on ``gpus``
    (default :func:`visible_gpus`): ``num_gpus_per_learner`` for each learner (the driver's one when
    ``num_learners=0``) and ``num_gpus_per_env_runner`` for each env runner, in all more than there are, a share
    above 1 that is not whole, or fractional shares that do not pack onto the GPUs the whole ones leave (Ray gives
    an actor's fraction from one GPU: two 0.6 shares need two GPUs)."""
    per_learner = float(getattr(config, "num_gpus_per_learner", 0) or 0)
    per_runner = float(getattr(config, "num_gpus_per_env_runner", 0) or 0)
    learners, runners = max(1, int(config.num_learners)), int(config.num_env_runners)
    shares = [per_learner] * learners * (per_learner > 0) + [per_runner] * runners * (per_runner > 0)
    if not shares:
        return
    gpus = visible_gpus() if gpus is None else float(gpus)
    asked = (f"num_gpus_per_learner={per_learner:g} x {learners} learner(s) and num_gpus_per_env_runner="
             f"{per_runner:g} x {runners} env runner(s)")
    for setting, share in (("num_gpus_per_learner", per_learner), ("num_gpus_per_env_runner", per_runner)):
        if share > 1 and share != int(share):
            raise ValueError(f"{setting}={share:g}: a share above 1 GPU must be whole (Ray places a fraction on one GPU)")
    if sum(shares) > gpus + 1e-9:
        raise ValueError(f"{asked} ask {sum(shares):g} GPUs and {_where_gpus()} has {gpus:g}: lower them, or add GPUs")
    free = int(gpus) - int(sum(s for s in shares if s >= 1))
    left: list[float] = []  # what each GPU the whole shares leave still holds, first fit, largest share first
    for share in sorted((s for s in shares if s < 1), reverse=True):
        fits = next((k for k, room in enumerate(left) if room >= share - 1e-9), None)
        if fits is None:
            left.append(1.0 - share)
        else:
            left[fits] -= share
    if len(left) > free:
        raise ValueError(f"{asked}: the fractional shares need {len(left)} GPU(s) beside the whole ones and "
                         f"{_where_gpus()} leaves {max(free, 0)} (each actor's fraction comes from one GPU): choose "
                         "shares that add up to 1 per GPU")


def _where_gpus() -> str:
    return "the Ray cluster" if ray.is_initialized() else "this machine"
