"""FSDP2 data parallelism for the native trainer: K processes launched by ``torchrun`` shard one policy.

    torchrun --nproc-per-node K -m ecpo_train.apps.cli train --config alfworld model=DIR fsdp=true
    ecpo train --nproc K --config alfworld model=DIR          # the same, torchrun started for you

What each process does in one iteration (the trainer's Algorithm 1, unchanged):

- rollout: the G task groups of the iteration are drawn identically on every process; process r plays the
  contiguous share ``G/K`` of whole groups (``local_share``). Generation runs with the weights gathered
  (``gathered``: one all-gather, then no collective per token, so processes whose episodes end at different
  steps never wait on each other); the shards are restored afterwards.
- credit: every estimator is a function of one group's rows (anchors never cross groups), so computing it on
  a process's whole groups gives exactly the advantages of the full batch.
- update: ``loss.policy_update`` with this object as its ``reducer``: mini-batch token counts are summed over
  processes, each process divides by (global count / K), and FSDP's gradient reduce-scatter averages over
  the K processes, so the gradient is the 1-process gradient of the same mini-batch. Every process runs the
  same number of micro-batch passes (padding with zero-weight passes), as each sharded pass is a collective.

Sharding: ``fully_shard`` on every decoder layer, then on the whole causal LM (FSDP2, per-parameter
DTensor shards; frozen base weights and trainable LoRA weights may share a layer). The reference is sharded
the same way, or is the policy itself with its adapter off (LoRA). Mixed precision ``bf16`` is
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``: float32 master shards, bf16 compute,
float32 gradient reduction. Backend: NCCL on CUDA (device ``cuda:LOCAL_RANK``), gloo on CPU.
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ecpo_train.core.credit import available_estimators, estimator_spec
from ecpo_train.runtime.policy_kinds import kinds_with, policy_spec

LAUNCH_HINT = ("launch K processes: `torchrun --nproc-per-node K -m ecpo_train.apps.cli train ...` "
               "or `ecpo train --nproc K ...`")


def launched_world_size() -> int:
    """The number of processes ``torchrun`` started (1 when not launched by it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def check_fsdp_request(fsdp: bool, estimator: str = "ecpo", policy: str = "llm") -> None:
    """One clear error for an FSDP request this process cannot serve."""
    if fsdp and launched_world_size() < 2:
        raise ValueError(f"fsdp=true needs at least 2 processes, this one runs alone: {LAUNCH_HINT}")
    if fsdp:
        check_fsdp_run(estimator, policy)


def check_fsdp_run(estimator: str, policy: str) -> None:
    """One clear error for a run FSDP cannot shard, before any process starts (``ecpo train --nproc K``)."""
    if not policy_spec(policy).fsdp:
        raise ValueError(f"fsdp=true shards a transformers model: set {kinds_with(fsdp=True)}")
    if estimator in available_estimators(needs_values=True):
        raise ValueError(f"fsdp=true does not shard a critic yet ({estimator} needs one): use a critic-free "
                         "estimator or one process")
    if estimator_spec(estimator).keeps_state:
        raise ValueError(f"fsdp=true plays a share of the groups in each process, but {estimator} keeps every "
                         "task's graph in one: use one process (or the RLlib engine, whose driver keeps it)")


def check_fsdp_launch(config: Any, nproc: int) -> None:
    """One clear error, before any of the ``nproc`` processes of ``ecpo train --nproc K`` starts, for a run they could
    not serve: one FSDP cannot shard (:func:`check_fsdp_run`), more processes than GPUs (each takes one) or than
    this machine's process ceiling on CPU (``limits.MAX_THREADS``; each holds a copy of the model), and groups that
    do not split whole over them (else each process refused it in a line of its own)."""
    from ecpo_train.runtime.limits import MAX_THREADS

    check_fsdp_run(config.estimator, config.policy)
    if config.resolved_device().startswith("cuda"):
        if nproc > torch.cuda.device_count():
            raise ValueError(f"--nproc {nproc}: each process takes one GPU, and this machine has "
                             f"{torch.cuda.device_count()}")
    elif nproc > MAX_THREADS:
        raise ValueError(f"--nproc {nproc}: at most {MAX_THREADS} processes on this machine's CPUs (each holds a copy "
                         "of the model)")
    check_whole_groups(config.n_groups, nproc, f"--nproc {nproc}")


def check_whole_groups(n_groups: int, processes: int, named: str = "") -> None:
    """The groups split whole over the processes (each plays its contiguous share of whole groups); ``named``: how
    the error names the process count (default: "the K processes")."""
    if n_groups % processes:
        raise ValueError(f"n_groups={n_groups} must be a multiple of {named or f'the {processes} processes'}: each "
                         "process plays whole groups")


class ProcessGroupReducer:
    """The ``loss.Reducer`` of ``policy_update`` over an initialised ``torch.distributed`` group: sums and maxima of
    numbers, statistics averaged (``*max*`` keys: the maximum). Used by ``DataParallel`` (torchrun/FSDP) and by the
    RLlib learners (their process group is RLlib's)."""

    def __init__(self, device: str = "cpu") -> None:
        self.world_size = dist.get_world_size()
        self.device = str(device)

    def _reduce(self, value: float, op: Any) -> float:
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=self._comm_device())
        dist.all_reduce(tensor, op=op)
        return float(tensor.item())

    def sum(self, value: float) -> float:
        return self._reduce(value, dist.ReduceOp.SUM)

    def max(self, value: float) -> float:
        return self._reduce(value, dist.ReduceOp.MAX)

    def mean_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """Average each statistic over processes (``*_max*`` keys take the maximum); keys may differ."""
        gathered: list[dict[str, float]] = [{} for _ in range(self.world_size)]
        dist.all_gather_object(gathered, dict(stats))
        keys = sorted({k for g in gathered for k in g})
        out = {}
        for key in keys:
            values = [g[key] for g in gathered if key in g]
            out[key] = float(np.max(values)) if "max" in key else float(np.mean(values))
        return out

    def _comm_device(self) -> str:
        return self.device if dist.get_backend() == "nccl" else "cpu"


class DataParallel(ProcessGroupReducer):
    """This process's place in the ``torchrun`` group; the ``loss.Reducer`` of ``policy_update``."""

    def __init__(self, device: str = "cpu") -> None:
        if not dist.is_initialized():
            backend = "nccl" if str(device).startswith("cuda") else "gloo"
            dist.init_process_group(backend=backend)
        self.rank = dist.get_rank()
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        if str(device).startswith("cuda"):
            torch.cuda.set_device(self.local_rank)
            device = f"cuda:{self.local_rank}"
        else:
            device = "cpu"
        super().__init__(device)
        self.is_main = self.rank == 0

    # ------------------------------------------------------------------ the groups this process plays
    def local_share(self, task_ids: Sequence[Any]) -> list[Any]:
        """The contiguous slice of whole groups this process plays (G must divide by K)."""
        n = len(task_ids)
        if n % self.world_size:
            raise ValueError(f"n_groups={n} must be a multiple of the {self.world_size} processes (whole groups each)")
        share = n // self.world_size
        return list(task_ids[self.rank * share : (self.rank + 1) * share])

    # ------------------------------------------------------------------ sharding
    def shard(self, model: torch.nn.Module, mixed_precision: str = "none") -> torch.nn.Module:
        """``fully_shard`` each decoder layer, then the whole model (in place; returns it)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
        from transformers.modeling_layers import GradientCheckpointingLayer

        kwargs: dict[str, Any] = {}
        if mixed_precision == "bf16":
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        for layer in layers:
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        # the learner scores through base_model + LM head, not forward: make that call an FSDP forward too,
        # so the root's weights (embeddings, final norm, a tied head) are gathered around it
        from ecpo_train.policies.llm import compute_response_logits
        from ecpo_train.policies.scoring import compute_candidate_logits

        model.sharded_response_logits = types.MethodType(compute_response_logits, model)
        register_fsdp_forward_method(model, "sharded_response_logits")
        model.sharded_candidate_logits = types.MethodType(compute_candidate_logits, model)  # policy_mode=score
        register_fsdp_forward_method(model, "sharded_candidate_logits")
        return model

    @contextlib.contextmanager
    def gathered(self, *models: torch.nn.Module) -> Iterator[None]:
        """Full weights on every process for the duration (sampling: no collective per generated token)."""
        from torch.distributed.fsdp import FSDPModule

        units = [m for model in models for m in model.modules() if isinstance(m, FSDPModule)]
        for unit in units:
            unit.unshard()
            unit.set_reshard_after_forward(False)
        try:
            yield
        finally:
            for unit in units:
                unit.set_reshard_after_forward(True)
                unit.reshard()

    # ------------------------------------------------------------------ whole-state gathers (checkpoints)
    def full_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Every tensor of ``module`` unsharded on the CPU (a collective: every process must call it)."""
        out = {}
        for key, value in module.state_dict().items():
            if hasattr(value, "full_tensor"):
                value = value.full_tensor()
            out[key] = value.detach().cpu() if isinstance(value, torch.Tensor) else value
        return out

    def checkpoint_states(self, policy: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        """Full (unsharded) policy and optimizer state dicts on the main process, empty elsewhere."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_state_dict(policy, optimizer, options=options)

    def load_checkpoint_states(self, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
                               policy_state: dict, optimizer_state: dict) -> None:
        """Load full state dicts (read on every process) into the sharded policy and optimizer."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(policy, optimizer, model_state_dict=policy_state, optim_state_dict=optimizer_state,
                       options=StateDictOptions(full_state_dict=True))

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
