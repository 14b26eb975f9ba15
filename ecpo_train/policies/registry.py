"""The policy registry: one entry per ``policy=`` name, declaring what the kind is and what it can do.

A kind is declared with ``register_policy(name, PolicySpec(...))``, as an estimator is with ``register_estimator``
and an environment with ``register_env``. The spec says how the kind is built from a run's config (``build``) and
loaded from a folder it saved (``load``), how ``ecpo sft`` turns expert play into its training rows
(``imitation``), whether it picks among the admissible commands or writes text (``chooses``), what ``model=`` is
for it (``model``), the settings it reads, and which of LoRA, FSDP, vLLM generation, a value head (``critic``), a
frozen reference copy and the RLlib engine it supports. The run reads these declarations instead of naming kinds:
the config refuses a setting the kind cannot serve, the builders call its ``build`` and ``critic``, ``ecpo sft`` its
``imitation``, the leaderboard its ``load``.

The built-in kinds (``llm``, ``text``, ``tabular``) are registered by ``ecpo_train.runtime.policy_kinds``, which the
run config imports; a kind of one's own is registered the same way before its config is built
(``docs/training.md``, "Add a policy kind"; ``tests/test_outside_policy.py``). The spec's callables take the run's
``TrainConfig``; they import what they build when called, so declaring a kind costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecpo_gym.kwargs import shown

# What ``model=`` names for a kind: a transformers causal LM (required; a folder, a hub id or an ``ecpo models``
# name, checked by its checksums), a folder the kind saved itself (optional: ``check_folder`` checks it, empty =
# fresh weights), or nothing (the kind reads no model)
MODEL_USES = ("causal-lm", "own", "none")


@dataclass
class Imitation:
    """How ``ecpo sft`` trains one run's policy on expert play (``PolicySpec.imitation(config, checkpointing)``).

    ``rows(demonstrations)`` -> ``(policy, prompt rows, reply rows, steps left out)``: the policy to fine-tune and
    each expert step as the rows its ``logprobs`` scores (``demonstration.context``, ``demonstration.action``);
    ``save(policy, folder)`` writes the fine-tuned policy where ``model=`` will load it; ``objective``: what the
    loss is, for ``sft.json``; ``max_tokens``: the tokens of one forward where the config bounds none (``None``:
    ``runtime.sft.SFT_MAX_TOKENS``)."""

    objective: str
    rows: Callable[[Sequence[Any]], tuple[Any, list, list, int]]
    save: Callable[[Any, Path], None]
    max_tokens: int | None = None


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy kind (module docstring).

    ``build(config, *, device=None, transformers_weights=True, generation_backend=None)``: the run's policy (the
    keywords place a policy that is not the run's sampler, ``runtime.builders.build_policy``; a kind without a
    transformers model may ignore them);
    ``settings``: the ``TrainConfig`` fields it reads beyond those every kind reads (a non-default value of a
    field only other kinds read is refused);
    ``model``: what ``model=`` is for it (:data:`MODEL_USES`); ``check_folder(folder)``: the one check of a folder
    of its own (``model="own"``), a ``ValueError`` naming what is wrong;
    ``chooses``: it always picks among the step's admissible commands rather than writing text (the kinds an error
    points a free-text env to are those that do not);
    ``load(folder)``: the policy a folder it saved holds, as it is (the leaderboard evaluates a warm start);
    ``folder_file``: the file that marks such a folder;
    ``imitation(config, checkpointing)``: :class:`Imitation`, how ``ecpo sft`` trains it (``None``: it has no warm
    start);
    ``critic(config, policy)``: its value head, for an estimator that needs values (``None``: it has none, such an
    estimator is refused);
    ``check(config)``: what else a config of this kind must satisfy (a ``ValueError``), after the shared checks;
    ``lora`` / ``fsdp`` / ``vllm`` / ``rllib``: it can be adapted by LoRA, sharded by FSDP, sampled by vLLM,
    trained through the RLlib engine;
    ``reference``: it has a frozen reference copy (``frozen_copy``; the KL term, ``kl_coef > 0``);
    ``saves_reference``: that copy grows with the run (the tabular table), so a checkpoint keeps it; otherwise it is
    rebuilt from the config's model.
    """

    build: Callable[..., Any]
    settings: tuple[str, ...] = ()
    model: str = "none"
    chooses: bool = True
    check_folder: Callable[[str], Any] | None = None
    load: Callable[[str], Any] | None = None
    folder_file: str = ""
    imitation: Callable[[Any, bool], Imitation] | None = None
    critic: Callable[[Any, Any], Any] | None = None
    check: Callable[[Any], None] | None = None
    lora: bool = False
    fsdp: bool = False
    vllm: bool = False
    rllib: bool = False
    reference: bool = True
    saves_reference: bool = False


_POLICIES: dict[str, PolicySpec] = {}


def register_policy(name: str, spec: PolicySpec) -> PolicySpec:
    """Declare the policy kind ``name`` (``policy=name`` in a run's config); ``ValueError`` when the name is taken
    or the spec is inconsistent. Returns ``spec``."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ValueError(f"a policy kind's name is a non-empty word, got {shown(name)}")
    if name in _POLICIES:
        raise ValueError(f"policy kind {shown(name)} is already registered")
    if spec.model not in MODEL_USES:
        raise ValueError(f"policy kind {shown(name)}: model={shown(spec.model)}; valid: {', '.join(MODEL_USES)}")
    if spec.model == "own" and spec.check_folder is None:
        raise ValueError(f"policy kind {shown(name)} loads a folder of its own (model='own'): declare check_folder")
    if spec.load is not None and not spec.folder_file:
        raise ValueError(f"policy kind {shown(name)} loads a folder: declare folder_file, the file that marks one")
    if spec.saves_reference and not spec.reference:
        raise ValueError(f"policy kind {shown(name)} saves a reference copy it does not have (reference=False)")
    _POLICIES[name] = spec
    return spec


def unregister_policy(name: str) -> None:
    """Forget the kind ``name`` (a test's own kind, so the other tests see only the built-in ones)."""
    _POLICIES.pop(name, None)


def available_policies(**capabilities: bool) -> list[str]:
    """Every registered kind, or those whose flags equal ``capabilities`` (``available_policies(lora=True)``)."""
    return [name for name, spec in _POLICIES.items()
            if all(getattr(spec, flag) == value for flag, value in capabilities.items())]


def policy_spec(name: str) -> PolicySpec:
    """The :class:`PolicySpec` registered under ``name`` (a ``ValueError`` listing the valid names otherwise)."""
    try:
        return _POLICIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"policy={shown(name)} is not a registered policy kind; valid: "
                         f"{', '.join(_POLICIES)}") from None


def kinds_with(**capabilities: bool) -> str:
    """``"policy=llm"`` (``" or "``-joined) for the kinds with ``capabilities``: what an error tells a user to set."""
    return " or ".join(f"policy={name}" for name in available_policies(**capabilities)) or "a policy kind that has it"


class PolicySettings(Mapping):
    """kind -> the settings it reads (``PolicySpec.settings``), live over the registry."""

    def __getitem__(self, name: str) -> tuple[str, ...]:
        if name not in _POLICIES:
            raise KeyError(name)
        return _POLICIES[name].settings

    def __iter__(self) -> Iterator[str]:
        return iter(list(_POLICIES))

    def __len__(self) -> int:
        return len(_POLICIES)
