"""``TrainConfig``: every knob of a native training run, its valid ranges, and its YAML / ``key=value`` I/O.

Presets live in ``ecpo_train/runtime/configs/*.yaml`` and state only what differs from the defaults here.
The credit hyperparameters are one nested ``CreditConfig`` (``credit: {kappa: 2.0, ...}`` in YAML,
``credit.kappa=3`` on the command line), so their defaults and ranges live once, in
``ecpo_train/core/credit/config.py``; an environment's step limit and history length come from its declaration
(``ecpo_gym.families``). Every field is checked when the config is built: a bad value is one ``ValueError``
naming the key and its valid range, before any work starts.

One coercion rule at every depth: YAML is read with YAML 1.2 numbers (``1e-7`` is a float, as in JSON; PyYAML's
YAML 1.1 reads it as a string), then each value, top-level or nested (``credit.eps``), is validated against its
dataclass annotation by pydantic in strict mode: an int is a float, nothing else converts (a quoted ``'1'`` stays
a string, a bool is never a number).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError

from ecpo_gym.families import declared_history_length
from ecpo_train.core.credit import CreditConfig, available_estimators, check_group_size, estimator_spec
from ecpo_train.core.loss import BEHAVIOUR_CORRECTIONS, UpdateSettings
from ecpo_train.core.rollout import check_anchor_key
from ecpo_train.core.tasks import TASK_DRAWS
from ecpo_train.policies import DTYPES
from ecpo_train.policies.decoding import DECODINGS
from ecpo_train.policies.prompting import PROMPT_STYLES
from ecpo_train.runtime import VALIDATION_TEMPERATURE

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
POLICIES = ("llm", "tabular")
POLICY_MODES = ("generate", "score")
DEVICES = ("auto", "cpu", "cuda")
_UPDATE = UpdateSettings()  # the update's defaults, read by the step-E fields below


@dataclass
class TrainConfig:
    """Every knob of a training run (defaults = the paper's ALFWorld values, App. A)."""

    # run
    run_dir: str = "runs/ecpo"
    seed: int = 0
    iterations: int = 150
    device: str = "auto"  # auto = cuda when this torch has it, else cpu; "cuda:1" picks a GPU
    # environment
    env_id: str = "ecpo/ALFWorldGen-v0"
    env_kwargs: dict = field(default_factory=dict)  # e.g. {max_steps: 10}; the step limit defaults to the env's
    env_workers: int = 0  # 0 = every copy in this process
    # > 1: the training rollout plays its groups in that many waves of whole groups, one wave's policy call
    # overlapping the others' env steps (core/rollout.py); equal episodes for policies whose call does not
    # depend on the batch (docs/training.md)
    rollout_waves: int = 1
    train_tasks: list | None = None  # None = every task id of the environment
    task_draw: str = "random"  # "random": each group's task drawn with replacement | "cycle": the list in order
    val_tasks: list | None = None  # None = the first val_num_tasks of the environment's task ids
    val_num_tasks: int = 16
    val_every: int = 10  # iterations between validations, plus the first and last iteration (0 = never)
    val_episodes_per_task: int = 1
    val_before_training: bool = False  # also validate the untrained policy, logged as iteration 0
    val_after_first: bool = True  # validate after iteration 1 as well (an early point on the curve)
    # group rollout (step A)
    n_groups: int = 16
    group_size: int = 8
    rollout_temperature: float = 1.0
    val_temperature: float = VALIDATION_TEMPERATURE
    history_length: int | None = None  # (observation, action) pairs in the prompt; None = the env's declared default
    # policy
    policy: str = "llm"  # "llm" (transformers) | "tabular"
    policy_mode: str = "generate"  # llm: "generate" free text (the paper) | "score" the admissible actions
    model: str = ""  # local path or hub id of a causal LM (policy=llm)
    dtype: str = "float32"
    prompt_style: str = "paper"  # "paper" (prompts/<family>.txt) | "compact" | "compact-actions" (CPU runs)
    max_prompt_length: int = 2048
    max_response_length: int = 512
    generation_backend: str = "transformers"  # "transformers" | "vllm" (GPU; weights synced after each update)
    vllm_kwargs: dict = field(default_factory=dict)  # extra vllm.LLM arguments, e.g. {gpu_memory_utilization: 0.5}
    # transformers sampling's decoding steps (policies/decoding.py): "auto" = graph on CUDA, eager on CPU |
    # "eager" | "static" (a KV cache sized once per call, any device) | "graph" (static + CUDA graphs, CUDA only)
    decoding: str = "auto"
    # credit (steps B-D)
    algorithm: str = "ecpo"  # a credit estimator name: ecpo, gigpo, grpo, ..., or ppo (learned critic + GAE)
    anchor_key: str = "state_key"  # "state_key" | "observation_key" (the paper's text anchor)
    credit: CreditConfig = field(default_factory=CreditConfig)  # the paper's defaults live in CreditConfig
    gae_lambda: float = 0.95  # an option of the ppo estimator (EstimatorSpec.options)
    # update (step E)
    lr: float = 1e-6
    critic_lr: float = 1e-5  # ppo only
    # the policy's lr rises linearly over the optimizer's first steps: lr * min(1, (k + 1) / lr_warmup_steps) at
    # its step k (counted by the optimizer's own state, so a fresh optimizer warms up again); 0 = constant lr.
    # AdamW's first steps move every weight by about lr whatever the gradient's size (its moments are new)
    lr_warmup_steps: int = 0
    weight_decay: float = 0.0
    # step E's knobs: their defaults are core.loss.UpdateSettings' (one home; builders.update_settings maps back)
    kl_coef: float = _UPDATE.kl_coef
    clip_eps: float = _UPDATE.clip_eps
    entropy_coef: float = _UPDATE.entropy_coef
    mini_batch_size: int = _UPDATE.mini_batch_size
    micro_batch_size: int = _UPDATE.micro_batch_size
    update_epochs: int = _UPDATE.epochs
    max_grad_norm: float = _UPDATE.max_grad_norm
    # rows sampled by lagged weights: "truncated_is" clips around the weights the update starts from and weighs
    # each token by min(pi_prox / mu, is_weight_cap); "none" = the paper's ratio to the sampling log-probs
    behaviour_correction: str = _UPDATE.behaviour_correction
    is_weight_cap: float = _UPDATE.is_weight_cap
    # scale (README "Train the paper's models"; policies/lora.py, policies/scaling.py, runtime/distributed.py)
    lora: dict = field(default_factory=dict)  # {r, alpha, dropout, target_modules}; empty = full fine-tuning
    gradient_checkpointing: bool = False  # recompute decoder layers in backward (policy and PPO critic)
    mixed_precision: str = "none"  # "bf16": float32 master weights, bf16 compute (autocast; FSDP2 param_dtype)
    max_tokens_per_micro_batch: int = _UPDATE.max_tokens_per_micro_batch  # > 0: packed by padded tokens, not rows
    fsdp: bool = False  # shard over the processes torchrun started (`ecpo train --nproc K`)
    threads: int | str = 0  # torch CPU threads; 0 = torch's default; auto = the cores others leave free (threads.py)
    explore_epsilon: float = 0.0  # policy_mode=score: pi = (1 - eps) softmax + eps uniform (policies/scoring.py)
    filter_equal_return_groups: bool = False  # DAPO-style: leave groups with all-equal returns out of the update
    loss_agg: str = "token-mean"  # or "trajectory-mean": every episode weighs the same (core/loss.py)
    # bookkeeping
    checkpoint_every: int = 10  # 0 = only at the end
    save_optimizer: bool = True  # false: slim checkpoints (weights + RNG only; a resume restarts AdamW's moments)
    tensorboard: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.credit, dict):
            self.credit = CreditConfig.from_kwargs(**self.credit)
        if self.history_length is None:
            self.history_length = declared_history_length(self.env_id)
        for name, (check, valid) in _RANGES.items():
            if not check(getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid: it must be {valid}")
        algorithms = available_estimators()
        if self.algorithm not in algorithms:
            raise ValueError(f"algorithm={self.algorithm!r}; valid: {', '.join(algorithms)}")
        check_anchor_key(self.anchor_key)
        choices = {"policy": POLICIES, "policy_mode": POLICY_MODES,
                   "prompt_style": PROMPT_STYLES, "mixed_precision": ("none", "bf16"),
                   "generation_backend": ("transformers", "vllm"), "decoding": DECODINGS, "loss_agg": ("token-mean", "trajectory-mean"),
                   "behaviour_correction": BEHAVIOUR_CORRECTIONS,
                   "task_draw": TASK_DRAWS, "dtype": DTYPES}
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise ValueError(f"{name}={getattr(self, name)!r}; valid: {', '.join(valid)}")
        if self.device.split(":")[0] not in DEVICES:
            raise ValueError(f"device={self.device!r}; valid: auto, cpu, cuda, cuda:N")
        if self.policy == "llm" and not self.model:
            from ecpo_train.policies import DEMO_MODEL

            raise ValueError(f"policy=llm needs model=<local path or hub id> (e.g. `ecpo models pull {DEMO_MODEL}`)")
        if self.generation_backend == "vllm" and (self.policy != "llm" or self.policy_mode != "generate"):
            raise ValueError("generation_backend=vllm needs policy=llm with policy_mode=generate")
        if self.decoding == "graph" and self.device == "cpu" or self.fsdp and self.decoding in ("static", "graph"):
            raise ValueError(f"decoding={self.decoding} needs one CUDA device without fsdp (static: without fsdp); "
                             "decoding=auto picks what the run can use")
        if self.policy_mode == "score":  # refused here, not ignored (tabular) or failing mid-rollout (search-QA)
            from ecpo_gym import family_of

            if self.policy != "llm":
                raise ValueError("policy_mode=score applies to policy=llm: the tabular policy has no text to score")
            if getattr(family_of(self.env_id), "family", None) == "searchqa":
                raise ValueError(f"policy_mode=score picks among admissible actions, but {self.env_id} lists none "
                                 "(search-QA's actions are free text): use policy_mode=generate")
        if self.lora:
            from ecpo_train.policies.lora import check_lora_settings, require_peft

            if self.policy != "llm":
                raise ValueError("lora adapts a transformers model: set policy=llm")
            check_lora_settings(self.lora)
            require_peft()
        if self.fsdp:
            from ecpo_train.runtime.distributed import check_fsdp_request

            check_fsdp_request(self.fsdp, self.algorithm, self.policy)
        check_group_size(self.group_size, self.algorithm)

    def validates_after(self, iteration: int) -> bool:
        """Whether the run validates after ``iteration``: every ``val_every`` iterations, after the last one, and
        after the first unless ``val_after_first`` is false (never when ``val_every`` is 0)."""
        if not self.val_every:
            return False
        return (iteration % self.val_every == 0 or iteration == self.iterations
                or (iteration == 1 and self.val_after_first))

    def estimator_options(self) -> dict[str, Any]:
        """The estimator's own keyword arguments beyond ``CreditConfig`` (``gae_lambda`` for ppo), read from the
        fields of the same name."""
        return {name: getattr(self, name) for name, _ in estimator_spec(self.algorithm).options}

    def credit_hyperparameters(self) -> dict[str, Any]:
        """The keyword arguments ``compute_advantages`` takes for this algorithm, one by one: every
        ``CreditConfig`` field plus :meth:`estimator_options`."""
        return dataclasses.asdict(self.credit) | self.estimator_options()

    def resolved_device(self) -> str:
        """``auto`` -> ``cuda`` when this torch build has a usable GPU, else ``cpu``; CUDA asked of a CPU-only
        torch is an error naming the fix."""
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device={self.device} but this torch ({torch.__version__}) has no usable CUDA device: "
                             "set device=cpu (or device=auto), or install a CUDA build of torch")
        return self.device


def _positive(v: Any) -> bool:
    return _real(v) and v > 0


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int_at_least(low: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "iterations": (_int_at_least(1), "an integer >= 1"),
    "seed": (_int_at_least(0), "an integer >= 0"),
    "env_workers": (_int_at_least(0), "an integer >= 0 (0 = in this process)"),
    "rollout_waves": (_int_at_least(1), "an integer >= 1 (1 = lock-step)"),
    "val_num_tasks": (_int_at_least(1), "an integer >= 1"),
    "val_every": (_int_at_least(0), "an integer >= 0 (0 = never validate)"),
    "val_episodes_per_task": (_int_at_least(1), "an integer >= 1"),
    "n_groups": (_int_at_least(1), "an integer >= 1"),
    "group_size": (_int_at_least(1), "an integer >= 1"),
    "rollout_temperature": (_positive, "a number > 0 (sampling needs a temperature; the ratio uses it)"),
    "val_temperature": (lambda v: _real(v) and v >= 0, "a number >= 0 (0 = greedy)"),
    "history_length": (_int_at_least(0), "an integer >= 0"),
    "max_prompt_length": (_int_at_least(1), "an integer >= 1"),
    "max_response_length": (_int_at_least(1), "an integer >= 1"),
    "gae_lambda": (lambda v: _real(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "lr": (_positive, "a number > 0"),
    "lr_warmup_steps": (_int_at_least(0), "an integer >= 0 (0 = no warmup)"),
    "critic_lr": (_positive, "a number > 0"),
    "weight_decay": (lambda v: _real(v) and v >= 0, "a number >= 0"),
    "kl_coef": (lambda v: _real(v) and v >= 0, "a number >= 0"),
    "clip_eps": (lambda v: _real(v) and 0 < v < 1, "a number in (0, 1)"),
    "entropy_coef": (lambda v: _real(v) and v >= 0, "a number >= 0"),
    "mini_batch_size": (_int_at_least(1), "an integer >= 1"),
    "micro_batch_size": (_int_at_least(1), "an integer >= 1"),
    "update_epochs": (_int_at_least(1), "an integer >= 1"),
    "max_grad_norm": (_positive, "a number > 0"),
    "is_weight_cap": (lambda v: _real(v) and v >= 1, "a number >= 1 (the truncated importance weight's cap)"),
    "max_tokens_per_micro_batch": (_int_at_least(0), "an integer >= 0 (0 = micro_batch_size rows)"),
    "checkpoint_every": (_int_at_least(0), "an integer >= 0 (0 = only at the end)"),
    "threads": (lambda v: v == "auto" or _int_at_least(0)(v), "auto or an integer >= 0 (0 = torch's default)"),
    "explore_epsilon": (lambda v: _real(v) and 0 <= v < 1, "a number in [0, 1)"),
}


# ---------------------------------------------------------------------------------------------- YAML / overrides
class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's floats: ``1e-7`` (no dot) is a number, not the string YAML 1.1 makes."""


_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def read_yaml(text: str) -> Any:
    """YAML text as data, with YAML 1.2 numbers (the one reader of presets and ``key=value`` overrides)."""
    return yaml.load(text, Loader=_Yaml12Loader)  # a SafeLoader subclass: no arbitrary objects


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """A config dataclass's resolved annotations (the modules use postponed annotations), computed once."""
    return typing.get_type_hints(cls)


@functools.cache
def _validator(hint: Any) -> TypeAdapter:
    return TypeAdapter(hint, config=ConfigDict(strict=True))


def _describe(hint: Any) -> str:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return " or ".join("a mapping" if dataclasses.is_dataclass(o) else getattr(o, "__name__", str(o)) for o in options)


def coerce_value(key: str, hint: Any, value: Any) -> Any:
    """The one coercion rule, at every depth: ``value`` validated against the annotation ``hint`` (pydantic, strict:
    an int is accepted as a float, nothing else converts). A config dataclass (``CreditConfig``) is a mapping whose
    entries follow the same rule, named ``key.entry``. A mismatch is one ``ValueError`` naming the key."""
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"config key {key!r} expects a mapping, got {value!r} ({type(value).__name__})")
        hints = _field_types(hint)
        return {name: coerce_value(f"{key}.{name}", hints[name], entry) if name in hints else entry
                for name, entry in value.items()}  # an unknown entry is named by the dataclass's own check
    try:
        return _validator(hint).validate_python(value)
    except ValidationError:
        raise ValueError(f"config key {key!r} expects {_describe(hint)}, got {value!r} ({type(value).__name__})") from None


def _parse_value(key: str, raw: str) -> Any:
    try:
        return read_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0]
        raise ValueError(f"override {key}={raw!r} is not valid YAML ({first})") from None


def apply_overrides(values: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key=value`` strings (values parsed as YAML; ``env_kwargs.max_steps=10`` / ``credit.kappa=3`` set
    one entry of a mapping)."""
    valid = {f.name for f in dataclasses.fields(TrainConfig)}
    credit_fields = {f.name for f in dataclasses.fields(CreditConfig)}
    values = dict(values)
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        value = _parse_value(key, raw)
        head, _, sub = key.partition(".")
        if head in credit_fields and head not in valid:
            raise ValueError(f"{head} is a credit hyperparameter: write credit.{head}={raw}")
        if head not in valid:
            raise ValueError(f"unknown config key {head!r}; valid keys: {', '.join(sorted(valid))}")
        if sub:
            nested = values.get(head) or {}
            nested = dataclasses.asdict(nested) if isinstance(nested, CreditConfig) else dict(nested)
            if not isinstance(nested, dict):
                raise ValueError(f"{head} is not a mapping; {key}= cannot set an entry of it")
            nested[sub] = value
            values[head] = nested
        else:
            values[key] = value
    return values


def make_config(values: dict[str, Any]) -> TrainConfig:
    """A ``TrainConfig`` from a plain dict, rejecting unknown keys, wrong types and out-of-range values."""
    fields_by_name = {f.name: f for f in dataclasses.fields(TrainConfig)}
    credit_fields = {f.name for f in dataclasses.fields(CreditConfig)}
    misplaced = sorted(set(values) & credit_fields - set(fields_by_name))
    if misplaced:
        raise ValueError(f"credit hyperparameter(s) {misplaced} belong under `credit:` (e.g. credit: {{kappa: 2.0}})")
    unknown = sorted(set(values) - set(fields_by_name))
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown}; valid keys: {', '.join(sorted(fields_by_name))}")
    hints = _field_types(TrainConfig)
    checked = {name: coerce_value(name, hints[name], value) for name, value in values.items()}
    if isinstance(checked.get("credit"), dict):
        try:
            checked["credit"] = CreditConfig.from_kwargs(**checked["credit"])
        except TypeError as err:
            raise ValueError(f"credit: {err}") from None
    return TrainConfig(**checked)


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML preset (a path, or a preset name in ``ecpo_train/runtime/configs/``) and apply overrides."""
    values: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if not file.exists() and (CONFIG_DIR / f"{path}.yaml").exists():
            file = CONFIG_DIR / f"{path}.yaml"
        if not file.exists():
            presets = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
            raise FileNotFoundError(f"config {path} not found (presets in {CONFIG_DIR}: {presets})")
        try:
            values = read_yaml(file.read_text()) or {}
        except yaml.YAMLError as err:
            where = getattr(err, "problem_mark", None)
            line = f" at line {where.line + 1}" if where is not None else ""
            raise ValueError(f"config {file} is not valid YAML{line}: {getattr(err, 'problem', err)}") from None
        if not isinstance(values, dict):
            raise ValueError(f"config {file} must be a YAML mapping of key: value")
    return make_config(apply_overrides(values, overrides))


def config_dict(config: TrainConfig) -> dict[str, Any]:
    """The config as plain YAML-able data (``credit`` as a mapping)."""
    return dataclasses.asdict(config)
