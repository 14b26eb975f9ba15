"""``TrainConfig``: every knob of a native training run, its valid ranges, and its YAML / ``key=value`` I/O.

Presets live in ``ecpo_train/runtime/configs/*.yaml`` and state only what differs from the defaults here.
The credit hyperparameters are one nested ``CreditConfig`` (``credit: {kappa: 2.0, ...}`` in YAML,
``credit.kappa=3`` on the command line), so their defaults and ranges live once, in
``ecpo_train/core/credit/config.py``; an environment's step limit and history length come from its declaration
(``ecpo_gym.families``). Each field declares its range or its choices where it is typed (pydantic ``Field(ge=...)``,
``Literal``); the sizes a machine can hold are bounded from its cores and memory (``runtime/limits.py``). Every
field is checked when the config is built, by the one rule of ``runtime/config_values.py`` (YAML 1.2 without
aliases, strict pydantic at every depth): a bad value is one ``ValueError`` naming the key and its valid range,
before any work starts.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field

from ecpo_gym.families import declared_history_length
from ecpo_train.core.credit import CreditConfig, available_estimators, check_group_size, estimator_spec
from ecpo_train.core.credit.config import ESTIMATOR_CREDIT_KEYS
from ecpo_train.core.credit.registry import declared_hyperparameter, declared_hyperparameters
from ecpo_train.core.loss import BEHAVIOUR_CORRECTIONS, UpdateSettings
from ecpo_train.core.rollout import ANCHOR_KEYS
from ecpo_train.core.tasks import TASK_DRAWS
from ecpo_train.policies import DTYPES
from ecpo_train.policies.decoding import DECODINGS
from ecpo_train.policies.prompting import PROMPT_STYLES
from ecpo_train.policies.registry import PolicySettings
from ecpo_train.policies.vllm_backend import check_vllm_kwargs
from ecpo_train.runtime import MIN_TEMPERATURE, VALIDATION_TEMPERATURE
from ecpo_train.runtime.config_values import coerce_value, field_types, read_yaml, shown
from ecpo_train.runtime.limits import (
    MAX_ENV_WORKERS,
    MAX_EPISODES,
    MAX_LR,
    MAX_SEED,
    MAX_SEQUENCE_TOKENS,
    MAX_THREADS,
)
from ecpo_train.runtime.policy_kinds import available_policies, kinds_with, policy_spec

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
POLICY_MODES = ("generate", "score")
_UPDATE = UpdateSettings()  # the update's defaults, read by the step-E fields below
# The settings each policy kind reads beyond those every kind reads (the run, the environment, the credit and the
# update), as its registration declares them (``PolicySpec.settings``; the built-in kinds' in
# ``runtime/policy_kinds.py``): a non-default value of one the run's policy does not read is refused
# (``check_settings_read``). A live view of the registry: a kind registered later is in it.
POLICY_SETTINGS = PolicySettings()
# The settings only some estimators read: the ``EstimatorSpec`` declaration that says whether one does (a critic it
# needs, state it keeps) and what the setting is for; an estimator's options (``gae_lambda``) are its registration's
ESTIMATOR_SETTINGS = {
    "critic_lr": ("needs_values", "the learned critic's, of an estimator that needs one: ppo"),
    "revisit_fraction": ("keeps_state", "the revisit schedule of an estimator that keeps state: tigpo"),
    "revisit_delay": ("keeps_state", "the revisit schedule of an estimator that keeps state: tigpo"),
}
# Keys a release renamed: the old name is refused with a pointer to the new one (one name per setting, both engines).
RENAMED = {"update_epochs": "num_epochs", "epochs": "num_epochs", "algorithm": "estimator"}

# Field types: a range or a choice lives on the field (its description is the note the error adds).
Count = Annotated[int, Field(ge=1)]
Tally = Annotated[int, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
Episodes = Annotated[int, Field(ge=1, le=MAX_EPISODES, description="episodes this machine's memory holds at once")]
TaskList = Annotated[list, Field(min_length=1, description="omit it for the default")]
Tokens = Annotated[int, Field(ge=1, le=MAX_SEQUENCE_TOKENS, description="longer than any model's context")]
# AdamW moves every weight by about lr per step whatever the gradient: past MAX_LR each step is noise (and 1e308
# overflows the update)
MAX_EPOCHS = 100  # an update's passes over one iteration's rows (PPO-style runs use 1-10)
MAX_IS_WEIGHT_CAP = 1e6  # a truncated importance weight's cap (2-10 in use): above float32's range it overflows
LearningRate = Annotated[float, Field(gt=0, le=MAX_LR, description="AdamW moves each weight by about lr per step")]
# An estimator's option is a run setting of the same name; its type, range and default are its declaration's (ppo's)
_GAE_LAMBDA = declared_hyperparameter("gae_lambda")
GaeLambda = _GAE_LAMBDA.type


@dataclass
class TrainConfig:
    """Every knob of a training run (defaults = the paper's ALFWorld values, App. A)."""

    # run
    run_dir: str = "runs/ecpo"
    seed: Annotated[int, Field(ge=0, le=MAX_SEED, description="the seeds numpy's global stream takes")] = 0
    iterations: Count = 150
    # auto = cuda when this torch has it, else cpu; "cuda:1" picks a GPU
    device: Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$", description="auto, cpu, cuda or cuda:N")] = "auto"
    # environment
    env_id: str = "ecpo/ALFWorldGen-v0"
    env_kwargs: dict = field(default_factory=dict)  # e.g. {max_steps: 10}; the step limit defaults to the env's
    env_workers: Annotated[int, Field(ge=0, le=MAX_ENV_WORKERS, description="0 = in this process; at most 4 per "
                                      "core (8 at least) and one per 0.5 GB of this machine")] = 0
    # > 1: the training rollout plays its groups in that many waves of whole groups, one wave's policy call
    # overlapping the others' env steps (core/rollout.py); equal episodes for policies whose call does not
    # depend on the batch (docs/training.md)
    rollout_waves: Annotated[int, Field(ge=1, description="1 = lock-step")] = 1
    train_tasks: TaskList | None = None  # None = every task id of the environment
    # "random": each group's task drawn with replacement | "cycle": the list in order
    task_draw: Literal[TASK_DRAWS] = "random"
    val_tasks: TaskList | None = None  # None = the first val_num_tasks of the environment's task ids
    val_num_tasks: Episodes = 16
    # iterations between validations, plus the first and last iteration (0 = never)
    val_every: Annotated[int, Field(ge=0, description="0 = never validate")] = 10
    val_episodes_per_task: Episodes = 1
    val_before_training: bool = False  # also validate the untrained policy, logged as iteration 0
    val_after_first: bool = True  # validate after iteration 1 as well (an early point on the curve)
    # group rollout (step A)
    n_groups: Episodes = 16
    group_size: Episodes = 8
    rollout_temperature: Annotated[float, Field(ge=MIN_TEMPERATURE, description="sampling needs a temperature; the "
                                                "ratio uses it; below it logits / T overflow")] = 1.0
    # 0 = greedy; else at least MIN_TEMPERATURE (__post_init__)
    val_temperature: Annotated[float, Field(ge=0, description="0 = greedy")] = VALIDATION_TEMPERATURE
    history_length: Tally | None = None  # (observation, action) pairs in the prompt; None = the env's declared default
    # policy
    # a registered policy kind (an open registry, runtime/policy_kinds.py): "llm" (transformers) | "tabular" |
    # "text" (a small action scorer trained from scratch, policies/text.py; model= a folder `ecpo sft` wrote, or
    # empty for random weights)
    policy: str = "llm"
    policy_mode: Literal[POLICY_MODES] = "generate"  # llm: "generate" free text (the paper) | "score" the admissible actions
    model: str = ""  # local path or hub id of a causal LM (policy=llm)
    dtype: Literal[DTYPES] = "float32"
    prompt_style: Literal[PROMPT_STYLES] = "paper"  # "paper" (prompts/<family>.txt) | "compact" | "compact-actions" (CPU runs)
    max_prompt_length: Tokens = 2048
    max_response_length: Tokens = 512
    # "transformers" | "vllm" (GPU; weights synced after each update)
    generation_backend: Literal["transformers", "vllm"] = "transformers"
    vllm_kwargs: dict = field(default_factory=dict)  # extra vllm.LLM arguments, e.g. {gpu_memory_utilization: 0.5}
    # transformers sampling's decoding steps (policies/decoding.py): "auto" = graph on CUDA, eager on CPU |
    # "eager" | "static" (a KV cache sized once per call, any device) | "graph" (static + CUDA graphs, CUDA only)
    decoding: Literal[DECODINGS] = "auto"
    # credit (steps B-D)
    estimator: str = "ecpo"  # a credit estimator name (an open registry): ecpo, gigpo, grpo, ..., or ppo (critic + GAE)
    anchor_key: Literal[ANCHOR_KEYS] = "state_key"  # "state_key" | "observation_key" (the paper's text anchor)
    credit: CreditConfig = field(default_factory=CreditConfig)  # the paper's defaults live in CreditConfig
    gae_lambda: GaeLambda = _GAE_LAMBDA.default  # an option of the ppo estimator, declared on its registration
    # the exploration-revisit schedule of an estimator that keeps state (tigpo; core/task_memory.py): the share of an
    # iteration's groups that revisit earlier tasks, and the updates between an exploration group and its revisit
    revisit_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.5
    revisit_delay: Annotated[int, Field(ge=1)] = 10
    # update (step E)
    lr: LearningRate = 1e-6
    critic_lr: LearningRate = 1e-5  # ppo only
    # the policy's lr rises linearly over the optimizer's first steps: lr * min(1, (k + 1) / lr_warmup_steps) at
    # its step k (counted by the optimizer's own state, so a fresh optimizer warms up again); 0 = constant lr.
    # AdamW's first steps move every weight by about lr whatever the gradient's size (its moments are new)
    lr_warmup_steps: Annotated[int, Field(ge=0, description="0 = no warmup")] = 0
    weight_decay: NonNegative = 0.0
    # step E's knobs: their defaults are core.loss.UpdateSettings' (one home; builders.update_settings maps back)
    kl_coef: NonNegative = _UPDATE.kl_coef
    clip_eps: Annotated[float, Field(gt=0, lt=1)] = _UPDATE.clip_eps
    entropy_coef: NonNegative = _UPDATE.entropy_coef
    mini_batch_size: Count = _UPDATE.mini_batch_size
    micro_batch_size: Count = _UPDATE.micro_batch_size
    # passes of each update over the iteration's rows (RLlib's name too); bounded: 10**18 passes never end
    num_epochs: Annotated[int, Field(ge=1, le=MAX_EPOCHS, description="passes of one update over its rows")] = \
        _UPDATE.num_epochs
    max_grad_norm: Positive = _UPDATE.max_grad_norm
    # rows sampled by lagged weights: "truncated_is" clips around the weights the update starts from and weighs
    # each token by min(pi_prox / mu, is_weight_cap); "none" = the paper's ratio to the sampling log-probs
    behaviour_correction: Literal[BEHAVIOUR_CORRECTIONS] = _UPDATE.behaviour_correction
    is_weight_cap: Annotated[float, Field(ge=1, le=MAX_IS_WEIGHT_CAP, description="the truncated importance "
                                          "weight's cap")] = \
        _UPDATE.is_weight_cap
    # scale (README "Train the paper's models"; policies/lora.py, policies/scaling.py, runtime/distributed.py)
    lora: dict = field(default_factory=dict)  # {r, alpha, dropout, target_modules}; empty = full fine-tuning
    gradient_checkpointing: bool = False  # recompute decoder layers in backward (policy and PPO critic)
    # "bf16": float32 master weights, bf16 compute (autocast; FSDP2 param_dtype)
    mixed_precision: Literal["none", "bf16"] = "none"
    # > 0: packed by padded tokens, not rows
    max_tokens_per_micro_batch: Annotated[int, Field(ge=0, description="0 = micro_batch_size rows")] = \
        _UPDATE.max_tokens_per_micro_batch
    fsdp: bool = False  # shard over the processes torchrun started (`ecpo train --nproc K`)
    # torch CPU threads; 0 = torch's default; auto = the cores others leave free (threads.py)
    threads: Annotated[int, Field(ge=0, le=MAX_THREADS, description="0 = torch's default; at most 4 per core "
                                  "(8 at least)")] | Literal["auto"] = 0
    # policy_mode=score: pi = (1 - eps) softmax + eps uniform (policies/scoring.py)
    explore_epsilon: Annotated[float, Field(ge=0, lt=1)] = 0.0
    # policy=text: the candidates of a step, "admissible" or "open" (the env family's open command set: the
    # admissible commands plus its command templates filled with what the episode named, invalid ones included)
    command_set: Literal["admissible", "open"] = "admissible"
    filter_equal_return_groups: bool = False  # DAPO-style: leave groups with all-equal returns out of the update
    loss_agg: Literal["token-mean", "trajectory-mean"] = "token-mean"  # trajectory-mean: every episode weighs the same
    # bookkeeping
    checkpoint_every: Annotated[int, Field(ge=0, description="0 = only at the end")] = 10
    save_optimizer: bool = True  # false: slim checkpoints (weights + RNG only; a resume restarts AdamW's moments)
    tensorboard: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        hints = field_types(TrainConfig)
        for item in dataclasses.fields(self):
            setattr(self, item.name, coerce_value(item.name, hints[item.name], getattr(self, item.name)))
        if isinstance(self.credit, dict):
            try:
                self.credit = CreditConfig.from_kwargs(**self.credit)
            except TypeError as err:
                raise ValueError(f"credit: {err}") from None
        if self.history_length is None:
            self.history_length = declared_history_length(self.env_id)
        if 0 < self.val_temperature < MIN_TEMPERATURE:
            raise ValueError(f"val_temperature={shown(self.val_temperature)} is invalid: it must be 0 (greedy) or a number >= "
                             f"{MIN_TEMPERATURE:g} (below it logits / T overflow)")
        for size, value in (("n_groups x group_size", self.n_groups * self.group_size),
                            ("val_episodes_per_task x validation tasks",
                             self.val_episodes_per_task * len(self.val_tasks or range(self.val_num_tasks)))):
            if value > MAX_EPISODES:
                raise ValueError(f"{size} = {value} episodes at once is more than this machine's memory holds "
                                 f"({MAX_EPISODES}, about 1 MiB each): lower them")
        estimators = available_estimators()
        if self.estimator not in estimators:
            raise ValueError(f"estimator={shown(self.estimator)}; valid: {', '.join(estimators)}")
        kinds = available_policies()
        if self.policy not in kinds:
            raise ValueError(f"policy={shown(self.policy)}; valid: {', '.join(kinds)}")
        spec = policy_spec(self.policy)  # what the kind is and can do: every rule on the policy below reads it
        unknown = sorted(set(spec.settings) - {item.name for item in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"policy kind {self.policy} declares settings that are not config keys: "
                             f"{', '.join(unknown)[:200]}")
        check_vllm_kwargs(self.vllm_kwargs)  # checked whichever backend is chosen: a typo is not left for later
        if spec.model == "causal-lm" and not self.model:
            from ecpo_train.policies import DEMO_MODEL

            raise ValueError(f"policy={self.policy} needs model=<local path or hub id> (e.g. `ecpo models pull "
                             f"{DEMO_MODEL}`)")
        if self.generation_backend == "vllm" and (not spec.vllm or self.policy_mode != "generate"):
            raise ValueError(f"generation_backend=vllm needs {kinds_with(vllm=True)} with policy_mode=generate")
        if self.decoding == "graph" and self.device == "cpu" or self.fsdp and self.decoding in ("static", "graph"):
            raise ValueError(f"decoding={self.decoding} needs one CUDA device without fsdp (static: without fsdp); "
                             "decoding=auto picks what the run can use")
        if self.policy_mode == "score":  # refused here, not ignored (tabular) or failing mid-rollout (search-QA)
            from ecpo_gym import family_of

            if "policy_mode" not in spec.settings:
                readers = " or ".join(f"policy={name}" for name in kinds if "policy_mode" in POLICY_SETTINGS[name])
                raise ValueError(f"policy_mode=score applies to {readers}: policy={self.policy} "
                                 + ("picks among the admissible actions already" if spec.chooses else "does not read it"))
            if getattr(family_of(self.env_id), "family", None) == "searchqa":
                raise ValueError(f"policy_mode=score picks among admissible actions, but {self.env_id} lists none "
                                 "(search-QA's actions are free text): use policy_mode=generate")
        self.check_policy_kind()
        if self.lora:
            from ecpo_train.policies.lora import check_lora_settings, require_peft

            if not spec.lora:
                raise ValueError(f"lora adapts a transformers model: set {kinds_with(lora=True)}")
            check_lora_settings(self.lora)
            require_peft()
        if self.fsdp:
            from ecpo_train.runtime.distributed import check_fsdp_request

            check_fsdp_request(self.fsdp, self.estimator, self.policy)
        check_group_size(self.group_size, self.estimator)
        self.check_settings_read()

    def check_settings_read(self) -> None:
        """A setting this run does not read, set to anything but its default, is refused (one line naming it), not
        ignored: a policy kind's own settings (``POLICY_SETTINGS``), an estimator's own (``ESTIMATOR_SETTINGS``,
        and the credit fields its registration declares, ``EstimatorSpec.credit_keys``)."""
        spec = estimator_spec(self.estimator)
        policy_only = dict.fromkeys(name for names in POLICY_SETTINGS.values() for name in names)
        unread = [name for name in policy_only if name not in POLICY_SETTINGS[self.policy]]
        for name in unread:
            if not _is_default(self, name):
                readers = " or ".join(f"policy={p}" for p, names in POLICY_SETTINGS.items() if name in names)
                raise ValueError(f"{name}={shown(getattr(self, name))} is read only by {readers}: policy={self.policy} "
                                 "would ignore it; leave it out")
        if self.explore_epsilon and self.policy_mode != "score":
            raise ValueError(f"explore_epsilon={self.explore_epsilon} mixes uniform exploration into "
                             f"policy_mode=score's choice: policy_mode={self.policy_mode} would ignore it; leave it out")
        for name, (declaration, use) in ESTIMATOR_SETTINGS.items():
            if not getattr(spec, declaration) and not _is_default(self, name):
                raise ValueError(f"{name}={shown(getattr(self, name))} is not read by estimator={self.estimator} "
                                 f"({use}); leave it out")
        for option in declared_hyperparameters(option=True):  # each a run setting of its name
            if option.name not in dict(spec.options) and not _is_default(self, option.name):
                readers = [n for n in available_estimators() if option.name in dict(estimator_spec(n).options)]
                raise ValueError(f"{option.name}={shown(getattr(self, option.name))} is not read by estimator="
                                 f"{self.estimator} (an option of an estimator that declares it: {', '.join(readers)}); "
                                 "leave it out")
        defaults = CreditConfig()
        for name in ESTIMATOR_CREDIT_KEYS:
            if not spec.reads_credit_key(name) and getattr(self.credit, name) != getattr(defaults, name):
                readers = [n for n in available_estimators() if name in (estimator_spec(n).credit_keys or ())]
                raise ValueError(f"credit.{name}={shown(getattr(self.credit, name))} is read only by estimator="
                                 f"{', '.join(readers)}: estimator={self.estimator} would ignore it; leave it out")

    def check_policy_kind(self) -> None:
        """What the run's policy kind cannot do (its ``PolicySpec``), refused before the run: a learned critic for a
        kind without a value head (ppo), the KL term for a kind without a reference copy, the kind's own rules
        (``check``; the text policy's: an env that lists no admissible actions, its open command set), a model that
        is not a whole folder of the kind's own."""
        spec = policy_spec(self.policy)
        if spec.critic is None and estimator_spec(self.estimator).needs_values:
            raise ValueError(f"estimator={self.estimator} needs a learned critic, which policy={self.policy} does not "
                             "have: use a critic-free estimator (ecpo, gigpo, grpo, ...)")
        if not spec.reference and self.kl_coef > 0:
            raise ValueError(f"kl_coef={self.kl_coef} pulls toward a frozen reference copy, which policy={self.policy} "
                             "does not have: set kl_coef=0")
        if spec.check is not None:
            spec.check(self)
        if spec.model == "own" and self.model:  # the folder's one check (checksums, types, bounds, weight shapes)
            spec.check_folder(self.model)

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
        return {name: getattr(self, name) for name, _ in estimator_spec(self.estimator).options}

    def credit_hyperparameters(self) -> dict[str, Any]:
        """The ``credit`` mapping ``compute_advantages`` takes for this estimator: every ``CreditConfig`` field
        plus :meth:`estimator_options`."""
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


# ---------------------------------------------------------------------------------------------- overrides
def _parse_value(key: str, raw: str) -> Any:
    try:
        return read_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0]
        raise ValueError(f"override {key}={shown(raw)} is not valid YAML ({first})") from None


def upgraded(values: dict[str, Any]) -> dict[str, Any]:
    """A config an earlier version recorded (a checkpoint's, a run's ``config.yaml``) in today's names: a renamed
    key takes its new name. Recorded runs are read through this; a config a user writes is refused instead, with
    the pointer."""
    values = dict(values)
    for old, new in RENAMED.items():
        if old in values and new not in values:
            values[new] = values.pop(old)
    return values


def _check_key(key: str, valid: set[str]) -> None:
    """A top-level key ``TrainConfig`` has; a renamed, misplaced or unknown one is one line that says where it went."""
    if key in valid:
        return
    if key in RENAMED:
        raise ValueError(f"config key {key!r} is now {RENAMED[key]!r}: write {RENAMED[key]}")
    if key in {f.name for f in dataclasses.fields(CreditConfig)}:
        raise ValueError(f"{key} is a credit hyperparameter: write it under credit (credit.{key}=... or "
                         f"credit: {{{key}: ...}})")
    raise ValueError(f"unknown config key {shown(key)}; valid keys: {', '.join(sorted(valid))}")


def apply_overrides(values: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key=value`` strings (values parsed as YAML; ``env_kwargs.max_steps=10`` / ``credit.kappa=3`` set
    one entry of a mapping)."""
    valid = {f.name for f in dataclasses.fields(TrainConfig)}
    values = dict(values)
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {shown(item)} is not key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        value = _parse_value(key, raw)
        head, _, sub = key.partition(".")
        _check_key(head, valid)
        if sub:
            nested = values.get(head) or {}
            nested = dataclasses.asdict(nested) if isinstance(nested, CreditConfig) else nested
            if not isinstance(nested, dict):
                raise ValueError(f"{head} is not a mapping; {key}= cannot set an entry of it")
            nested = dict(nested)
            nested[sub] = value
            values[head] = nested
        else:
            values[key] = value
    return values


def _is_default(config: TrainConfig, name: str) -> bool:
    """Whether the field ``name`` of ``config`` holds its declared default."""
    item = next(f for f in dataclasses.fields(config) if f.name == name)
    default = item.default_factory() if item.default is dataclasses.MISSING else item.default
    return getattr(config, name) == default


def make_config(values: dict[str, Any]) -> TrainConfig:
    """A ``TrainConfig`` from a plain dict, rejecting unknown keys, wrong types and out-of-range values."""
    valid = {f.name for f in dataclasses.fields(TrainConfig)}
    for key in sorted(map(str, values)):
        _check_key(key, valid)
    return TrainConfig(**values)


EXTENDS = "extends"  # a preset's key naming the preset it starts from (its own keys replace that one's)


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML preset (a path, or a preset name in ``ecpo_train/runtime/configs/``) and apply overrides."""
    values = preset_values(path) if path is not None else {}
    return make_config(apply_overrides(values, overrides))


def preset_values(path: str | Path, chain: tuple[str, ...] = ()) -> dict[str, Any]:
    """A preset's keys: its file's, over those of the preset it ``extends`` (a preset name, read the same way;
    a key of the file replaces the base's whole value)."""
    file = Path(path)
    if not os.path.exists(file) and os.path.exists(CONFIG_DIR / f"{path}.yaml"):  # (False for a name too long)
        file = CONFIG_DIR / f"{path}.yaml"
    if not str(path).strip() or not os.path.exists(file):  # ('' would be the current folder)
        presets = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
        name = str(path)[:200] if str(path).strip() else repr(str(path))
        raise FileNotFoundError(f"config {name} not found (presets in {CONFIG_DIR}: {presets})")
    if file.is_dir():
        raise ValueError(f"config {shown(str(path))} is a folder: give a YAML file or a preset name")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else "it is not UTF-8 text"
        raise ValueError(f"config {shown(str(path))} cannot be read: {why}") from None
    try:
        values = read_yaml(text) or {}
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ValueError(f"config {file} is not valid YAML{line}: {getattr(err, 'problem', err)}") from None
    if not isinstance(values, dict):
        raise ValueError(f"config {file} must be a YAML mapping of key: value")
    base = values.pop(EXTENDS, None)
    if base is None:
        return values
    if not isinstance(base, str) or not os.path.isfile(CONFIG_DIR / f"{base}.yaml"):
        raise ValueError(f"config {file}: {EXTENDS}: {shown(base)} is not a preset name")
    if base in chain:
        raise ValueError(f"config {file}: {EXTENDS} loops through {' -> '.join((*chain, base))}")
    return preset_values(base, (*chain, base)) | values


def config_dict(config: TrainConfig) -> dict[str, Any]:
    """The config as plain YAML-able data (``credit`` as a mapping)."""
    return dataclasses.asdict(config)
