"""The LLM path's RLlib ``EnvRunner``: whole groups played by the project's one episode loop.

``ECPOConfig`` in LLM mode sets ``env_runners(env_runner_cls=LLMEnvRunner)``; RLlib then starts
``num_env_runners`` of these as Ray actors (or one in the driver with ``num_env_runners=0``) and restarts a
failed one under ``fault_tolerance(restart_failed_env_runners=True)``. Each runner holds:

- the policy: a ``CausalLMRLModule`` (inference only) whose ``policy`` is built by
  ``runtime.builders.build_policy`` from the run's ``TrainConfig``, the scoring policy included: one frozen
  copy of the weights (no gradients, no optimizer, no KL reference: those are the learner's), and with
  vLLM and no LoRA none outside the engine;
- its environments: a ``GroupVectorEnv`` per group count it is asked to play.

``sample_groups`` plays the groups the algorithm assigned (tasks, env seed and global group/trajectory ids
come from the driver, so which runner plays a group does not change what it plays) with
``core.rollout.collect_rollout`` and returns the rows as the project's step-row table
(``TrajectoryBatch``, token columns included) with the episodes' outcomes: no RLlib episode is built and
no column re-derived. ``validate`` is the native trainer's validation on this runner's weights.

Weights arrive through ``set_state`` (RLlib's weight sync from the learner group: under LoRA the adapter
tensors only).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

import ray
import torch
from ray.rllib.core import COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.env import INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from ecpo_train.core.iteration import ENV_SEED_BOUND, seed_streams
from ecpo_train.core.rollout import training_rollout
from ecpo_train.core.tasks import training_tasks
from ecpo_train.integrations.rllib.llm.module import TRAIN_CONFIG, CausalLMRLModule, token_spaces
from ecpo_train.policies.choose import own_generator
from ecpo_train.runtime.threads import apply_threads

# Runner k > 1 samples from seed + RUNNER_SEED_STRIDE * (k - 1): runner 1 (or the driver's) has the run's seed,
# so one runner reproduces the native trainer; others draw independent streams.
RUNNER_SEED_STRIDE = 104729


class LLMEnvRunner(EnvRunner):
    """Plays assigned groups of a text env with the run's LLM policy; returns ``TrajectoryBatch`` rows."""

    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        # the TrainConfig the algorithm's config holds (RLlib hands each runner that config, frozen)
        self.train_config = self.config.to_train_config()
        tc = self.train_config
        index = max(1, int(self.worker_index or 0))
        self.seed = tc.seed + RUNNER_SEED_STRIDE * (index - 1)
        # The native trainer's order: seed every stream, then the environment, then the policy, so one runner
        # samples exactly what the native trainer samples for the same seed.
        self._rng = seed_streams(self.seed)
        self._envs: dict[int, Any] = {}
        self._val_envs: Any = None
        self.task_ids = training_tasks(tc, self.env_task_ids)
        apply_threads(tc.threads)  # the run's torch threads in this actor too (Ray's default is its CPU share)
        self.module = CausalLMRLModule(
            observation_space=None, action_space=None, inference_only=True,
            model_config={TRAIN_CONFIG: tc})
        self.module.eval()
        self.policy = self.module.policy
        own = own_generator(self.policy)
        if own is not None:  # the chooser's stream (policies.choose) is this runner's too
            own.manual_seed(self.seed)
        self._weights_seq_no = 0
        if getattr(self.policy, "backend", None) is not None and self.policy.model is not None:
            print(f"LLMEnvRunner {index}: keeps a transformers copy of the model beside its vLLM engine: the "
                  "learner sends the LoRA adapter only, and vLLM needs the merged weights (base + adapter), "
                  "computed here", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ environments
    def _env_for(self, num_groups: int) -> Any:
        from ecpo_gym.group import GroupVectorEnv

        tc = self.train_config
        if num_groups not in self._envs:
            self._envs[num_groups] = GroupVectorEnv(tc.env_id, num_groups, tc.group_size,
                                                    num_workers=tc.env_workers, env_kwargs=tc.env_kwargs)
        return self._envs[num_groups]

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def sample_groups(self, task_ids: list[str], env_seed: int, group_offset: int = 0) -> dict[str, Any]:
        """Play group ``g`` on ``task_ids[g]`` (copy ``i`` reset with ``env_seed + i``); the rows come back with
        group ids ``group_offset + g`` and trajectory ids ``group_offset * N + i`` (the run's global ids), each
        stamped with the version of the weights that played it (the learner's update count, RLlib's weights
        sequence number: one call plays with one version, since a weight sync waits for the call to end)."""
        tc = self.train_config
        if not task_ids:
            raise ValueError("sample_groups needs at least one task id")
        envs = self._env_for(len(task_ids))
        self.policy.eval()
        started = time.perf_counter()
        rollout = training_rollout(envs, self.policy, task_ids, tc, env_seed, policy_version=self._weights_seq_no)
        episodes = [dataclasses.replace(e, group_id=e.group_id + group_offset,
                                        traj_id=e.traj_id + group_offset * tc.group_size, transcript=[])
                    for e in rollout.episodes]
        return {"batch": rollout.batch.renumbered(group_offset, group_offset * tc.group_size),
                "episodes": episodes, "generation_seconds": rollout.generation_seconds,
                "env_seconds": rollout.env_seconds, "seconds": time.perf_counter() - started,
                "runner": int(self.worker_index or 0)}

    def sample(self, **kwargs: Any) -> dict[str, Any]:
        """RLlib's ``sample``: ``groups_per_env_runner`` groups on tasks this runner draws itself (the algorithm
        assigns tasks with :meth:`sample_groups` instead, so that runners never repeat one another)."""
        groups = int(getattr(self.config, "groups_per_env_runner", 1))
        tasks = [self.task_ids[int(k)] for k in self._rng.integers(len(self.task_ids), size=groups)]
        return self.sample_groups(tasks, int(self._rng.integers(ENV_SEED_BOUND)))

    @torch.no_grad()
    def validate(self, task_ids: list[str], seed: int) -> tuple[dict[str, float], list[Any]]:
        """The native trainer's validation (``runtime.builders.validation_outcome``) on this runner's weights:
        the episodes' metrics and the exact success (``val/...``), and each episode's outcome in validation
        order (``run_dir.EpisodeOutcome``, for the run folder's ``validation.jsonl``)."""
        from ecpo_train.runtime.builders import validation_envs, validation_metrics, validation_outcome
        from ecpo_train.runtime.run_dir import EpisodeOutcome

        tc = self.train_config
        self._val_envs = validation_envs(tc, len(task_ids), self._val_envs)
        self.policy.eval()
        episodes, exact = validation_outcome(self.policy, tc, self._val_envs, list(task_ids), seed)
        return (validation_metrics(episodes, exact),
                [EpisodeOutcome(str(e.task_id), bool(e.won), int(e.length)) for e in episodes])

    def env_task_ids(self) -> list[str]:
        """Every task id of the environment (the driver picks training and validation tasks from them)."""
        return [str(t) for t in self._env_for(1).task_ids]

    def sampling_state(self) -> dict[str, Any]:
        """The random streams this runner samples from (checkpointed with the algorithm: exact resume): torch's,
        the runner's numpy stream, and the policy's own generator where it samples from one (the text and tabular
        policies: the native checkpoint keeps it in the policy's state, which the module's weight sync leaves out)."""
        state = {"torch": torch.get_rng_state(), "numpy": self._rng.bit_generator.state}
        own = own_generator(self.policy)
        if own is not None:
            state["policy"] = own.get_state()
        return state

    def set_sampling_state(self, state: dict[str, Any] | None) -> None:
        if state is None:  # a runner the checkpoint did not have keeps its own fresh streams
            return
        torch.set_rng_state(state["torch"])
        self._rng.bit_generator.state = state["numpy"]
        own = own_generator(self.policy)
        if own is not None and state.get("policy") is not None:
            own.set_state(state["policy"])

    # ------------------------------------------------------------------ RLlib's EnvRunner contract
    def assert_healthy(self) -> None:
        # Environments are built on demand (one per group count asked for): a runner given train_tasks has none yet.
        assert self.policy is not None, "LLMEnvRunner was not set up"

    def get_spaces(self) -> dict[str, Any]:
        tc = self.train_config
        spaces = token_spaces(self.policy.vocab_size, tc.max_prompt_length, tc.max_response_length)
        return {INPUT_ENV_SPACES: spaces, DEFAULT_MODULE_ID: spaces}

    def get_metrics(self) -> Any:
        return self.metrics.reduce()

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {COMPONENT_RL_MODULE: {DEFAULT_MODULE_ID: self.module.get_state()},
                WEIGHTS_SEQ_NO: self._weights_seq_no}

    def set_state(self, state: dict[str, Any]) -> None:
        """Load the learner's weights (``EnvRunnerGroup.sync_weights``, which may pass an object ref); vLLM engines
        get them too."""
        state = _resolved(state)
        modules = _resolved(state.get(COMPONENT_RL_MODULE))
        if modules is None:
            return
        weights = _resolved(modules.get(DEFAULT_MODULE_ID, modules))
        self.module.set_state(weights)
        self.policy.sync_generation_weights()
        self._weights_seq_no = int(state.get(WEIGHTS_SEQ_NO, self._weights_seq_no + 1))

    def make_env(self) -> None:
        self._env_for(1)

    def make_module(self) -> None:
        """The module is built in ``__init__`` (its policy needs the run's ``TrainConfig``)."""

    def stop(self) -> None:
        for envs in [*self._envs.values(), self._val_envs]:
            if envs is not None:
                envs.close()
        self._envs, self._val_envs = {}, None


def _resolved(value: Any) -> Any:
    """RLlib hands states over as values or object refs, at any level."""
    return ray.get(value) if isinstance(value, ray.ObjectRef) else value
