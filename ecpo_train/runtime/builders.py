"""The building blocks of a training run, each used by the trainer and by the tools around it.

``build_policy`` / ``build_critic`` turn a ``TrainConfig`` into modules (the leaderboard's checkpoint agent and
``ecpo sft`` build their policy the same way); ``update_settings`` is step E's settings; ``update_on_table`` is
step E on a step-row table (its token columns, old log-probs padded when the table was built);
``exact_success`` is the noise-free
validation of the diagnostic corridors; ``sampling_state_restored`` keeps validation from disturbing the training
RNG streams.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ecpo_gym.kwargs import shown
from ecpo_train.core.loss import UpdateSettings
from ecpo_train.core.tasks import task_lists
from ecpo_train.policies.base import Policy, StepContext
from ecpo_train.policies.choose import own_generator
from ecpo_train.runtime.config import TrainConfig
from ecpo_train.runtime.models import check_model_folder, model_folder
from ecpo_train.runtime.policy_kinds import policy_spec


def update_settings(config: TrainConfig) -> UpdateSettings:
    return UpdateSettings(clip_eps=config.clip_eps, kl_coef=config.kl_coef, entropy_coef=config.entropy_coef,
                          mini_batch_size=config.mini_batch_size, micro_batch_size=config.micro_batch_size,
                          num_epochs=config.num_epochs, max_grad_norm=config.max_grad_norm,
                          max_tokens_per_micro_batch=config.max_tokens_per_micro_batch,
                          behaviour_correction=config.behaviour_correction, is_weight_cap=config.is_weight_cap)


def update_on_table(policy: Policy, config: TrainConfig, table: Any, step_advantages: torch.Tensor,
                    optimizer: torch.optim.Optimizer, generator: np.random.Generator, *, reference: Any = None,
                    reducer: Any = None, logprobs: Any = None) -> dict[str, float]:
    """Step E on a step-row table: ``core.loss.policy_update`` over the table's rows, with the run's settings.

    The one place the update is wired, for the native trainer and the RLlib learner alike: the current policy's
    log-probs of the stored rows (``logprobs(prompts, responses, with_entropy)``; default ``policy.logprobs``,
    the RLlib learner passes its module's forward), the frozen reference's, the rows' lengths, the scoring
    policy's shared contexts, the rows the iteration's plan keeps (``core.iteration.update_plan``), the loss
    aggregation and the thread count.
    """
    from ecpo_train.core.iteration import update_keep
    from ecpo_train.core.loss import policy_update, trajectory_mean_weights
    from ecpo_train.runtime.threads import apply_threads

    if not table.has_tokens():
        raise ValueError("the update needs a sampled table: this TrajectoryBatch has no token columns")
    prompts, responses = table.prompt_ids, table.response_ids
    old_logp, old_mask = torch.from_numpy(table.old_logprobs), torch.from_numpy(table.old_logprob_mask)
    want_entropy = config.entropy_coef > 0
    if logprobs is None:
        def logprobs(prompt_rows, response_rows, with_entropy):
            return policy.logprobs(prompt_rows, response_rows, temperature=config.rollout_temperature,
                                   with_entropy=with_entropy)

    def logprob_fn(rows: np.ndarray):
        return logprobs([prompts[i] for i in rows], [responses[i] for i in rows], want_entropy)

    ref_fn = None
    if reference is not None:
        def ref_fn(rows: np.ndarray) -> torch.Tensor:
            with torch.no_grad():
                return reference.logprobs([prompts[i] for i in rows], [responses[i] for i in rows],
                                          temperature=config.rollout_temperature)[0]

    apply_threads(config.threads)  # from the cores free now (ecpo_train/runtime/threads.py)
    # the scoring policy computes each distinct (prompt, candidates) row once per micro-batch
    row_keys = [tuple(p) for p in prompts] if config.policy_mode == "score" else None
    keep = update_keep(table)
    if config.loss_agg == "trajectory-mean":
        weights = torch.as_tensor(trajectory_mean_weights(table.traj_id), dtype=step_advantages.dtype)
        step_advantages = step_advantages * weights.to(step_advantages.device)
    parameters = [p for p in policy.parameters() if p.requires_grad]
    stats = policy_update(logprob_fn, ref_fn, parameters, optimizer,
                          old_logp, old_mask, step_advantages, update_settings(config), generator,
                          before_step=lambda: before_optimizer_step(policy, optimizer, config),
                          row_tokens=np.asarray([len(p) + len(r) for p, r in zip(prompts, responses)]),
                          reducer=reducer, row_keys=row_keys, keep=keep)
    probe = np.arange(min(len(prompts), config.micro_batch_size))  # (one micro-batch of rows, scored again)
    check_finite_update(parameters, step_advantages, reducer, probe=lambda: logprob_fn(probe)[:2])
    return stats


# what can make an update non-finite, for the one line that stops the run
CREDIT_OVERFLOW = "the credit's advantages are nan or infinite: lower the credit.* settings (omega, pgpo_alpha, ...)"
STEP_OVERFLOW = ("the optimizer step made the policy's weights, or its log-probs, nan or infinite: lower lr, "
                 "weight_decay, kl_coef, entropy_coef or is_weight_cap")


def check_finite_update(parameters: list[torch.Tensor], step_advantages: torch.Tensor, reducer: Any = None,
                        probe: Any = None) -> None:
    """``ValueError`` (one line) when an update left a nan or infinite weight, or weights so large that the policy's
    log-probs of a few rows (``probe()``: ``(logp, mask)``) are no longer finite: the run stops there, before the
    weights are logged, synced to the runners or saved, so the last checkpoint written stays the last good one.
    Under several processes every one refuses if any does."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in parameters]
    bad = not all(bool(torch.isfinite(p.detach()).all()) for p in local)
    if not bad and probe is not None:
        with torch.no_grad():
            logp, mask = probe()
        bad = not bool(torch.isfinite(logp[mask.to(logp.device) > 0]).all())
    if reducer is not None:
        bad = reducer.max(float(bad)) > 0
    if bad:
        why = CREDIT_OVERFLOW if not bool(torch.isfinite(step_advantages).all()) else STEP_OVERFLOW
        raise ValueError(f"{why}; the run stops here and nothing of this update is saved (the last checkpoint "
                         "written is kept)")


def warmup_lr(lr: float, warmup_steps: int, steps_taken: int) -> float:
    """The learning rate of optimizer step ``steps_taken`` (0-based) under a linear warmup of ``warmup_steps``."""
    return lr if warmup_steps <= 0 else lr * min(1.0, (steps_taken + 1) / warmup_steps)


def optimizer_steps_taken(optimizer: torch.optim.Optimizer) -> int:
    """How many steps ``optimizer`` has taken, from its own state (0 for a fresh one)."""
    steps = [int(state["step"]) for state in optimizer.state.values() if "step" in state]
    return max(steps, default=0)


def before_optimizer_step(policy: Policy, optimizer: torch.optim.Optimizer, config: TrainConfig) -> None:
    """Run before every policy optimizer step: grow lazily created state, then set the warmup's lr."""
    policy.grow_optimizer_state(optimizer)
    if config.lr_warmup_steps:
        lr = warmup_lr(config.lr, config.lr_warmup_steps, optimizer_steps_taken(optimizer))
        for group in optimizer.param_groups:
            group["lr"] = lr


# ---------------------------------------------------------------------------------------------- building blocks
def build_policy(config: TrainConfig, device: str | None = None, *, transformers_weights: bool = True,
                 generation_backend: str | None = None) -> Policy:
    """The run's policy. ``transformers_weights=False``: a vLLM sampler whose engine holds the only copy of the
    weights (``TransformersPolicy``; an RLlib vLLM env runner without LoRA). ``device`` and ``generation_backend``
    (``None``: the config's) place a policy that is not the run's sampler: an RLlib learner's, which never
    generates. The run's policy kind builds it (``PolicySpec.build``, ``runtime/policy_kinds.py``)."""
    return policy_spec(config.policy).build(config, device=device, transformers_weights=transformers_weights,
                                            generation_backend=generation_backend)


def build_critic(config: TrainConfig, policy: Policy) -> tuple[torch.nn.Module | None, torch.optim.Optimizer | None]:
    """The learned critic (the policy kind's value head, ``PolicySpec.critic``) and its AdamW when the run's
    estimator needs values (PPO), else ``(None, None)``. (A kind without one is refused by the config.)"""
    from ecpo_train.core.credit import estimator_spec

    if not estimator_spec(config.estimator).needs_values:
        return None, None
    critic: torch.nn.Module = policy_spec(config.policy).critic(config, policy)
    return critic, torch.optim.AdamW(critic.parameters(), lr=config.critic_lr, weight_decay=config.weight_decay)


def context_distributions(policy: Any, env: Any, env_id: str, states: Sequence[str],
                          temperature: float) -> dict[str, dict[str, float]]:
    """pi(. | s) at ``temperature`` in each of ``states`` of an env that can show a state without its history
    (``env.state_view``: the diagnostic corridors), from the policy's ``action_distributions`` of that view
    (the scoring LLM with a history-free prompt)."""
    with torch.no_grad():
        return dict(zip(states, policy.action_distributions(state_contexts(env, env_id, states), temperature)))


def state_contexts(env: Any, env_id: str, states: Sequence[str]) -> list[StepContext]:
    """The history-free context of each state of an env that can show a state on its own (``env.state_view``)."""
    contexts = []
    for state in states:
        view = env.state_view(state)
        contexts.append(StepContext(env_name=env_id, task=view["task"], step_count=view["step"], history=[],
                                    observation=view["observation"], admissible_actions=view["admissible_actions"],
                                    state_key=state))
    return contexts


def exact_success(policy: Policy, env_id: str, env_kwargs: dict, task_ids: Sequence[str],
                  temperature: float, history_length: int | None = None) -> float | None:
    """Noise-free validation where both sides allow it: the env exposes its exact MDP (the diagnostic
    corridors; ``ecpo_gym.diagnostic.exact_success``) and the policy its action distribution in each state
    (the tabular policy; the scoring LLM when its prompt shows no history); otherwise ``None``."""
    from ecpo_gym.diagnostic import exact_success as mdp_success
    from ecpo_gym.group_workers import make_env

    by_state = hasattr(policy, "action_probabilities")
    by_context = hasattr(policy, "action_distributions") and history_length == 0
    if not (by_state or by_context):
        return None
    env = make_env(env_id, env_kwargs, env_checker=True).unwrapped
    try:
        if not (hasattr(env, "transition_model") and hasattr(env, "initial_state")):
            return None
        if by_state:
            def probabilities(state: str, actions: list[str]) -> dict[str, float]:
                return policy.action_probabilities(state, actions, temperature=temperature)
        else:
            if not hasattr(env, "state_view"):
                return None
            states = [state for task in task_ids for state in env.transition_model(task)]
            table = context_distributions(policy, env, env_id, states, temperature)

            def probabilities(state: str, actions: list[str]) -> dict[str, float]:
                return table[state]
        return mdp_success(env, list(task_ids), probabilities)
    finally:
        env.close()


def validation_envs(config: TrainConfig, tasks: int, cached: Any = None) -> Any:
    """The envs a validation of ``tasks`` tasks plays on (``val_episodes_per_task`` copies each), the one place
    both engines build them: ``cached`` (the previous validation's) where it holds that many groups, else new ones
    (``cached`` is closed)."""
    if cached is not None and cached.num_groups == tasks:
        return cached
    from ecpo_gym.group import GroupVectorEnv

    if cached is not None:
        cached.close()
    return GroupVectorEnv(config.env_id, tasks, config.val_episodes_per_task, num_workers=config.env_workers,
                          env_kwargs=config.env_kwargs)


def validation_outcome(policy: Policy, config: TrainConfig, envs: Any, task_ids: Sequence[str],
                       seed: int) -> tuple[list, float | None]:
    """One validation pass on the fixed tasks at the validation temperature: the episodes of one rollout of
    ``envs`` (a group of ``val_episodes_per_task`` copies per task, copy ``i`` reset with ``seed + i``) and,
    where the env and the policy allow it, the exact success (``exact_success``; else ``None``). The training
    RNG streams are left as they were. Every choice among candidates uses the draw fixed by ``(seed, copy,
    step)`` (``collect_rollout(draws_seed=seed)``): one set of weights always validates to the same episodes,
    and two checkpoints' episodes pair up (``benchmarks.stats.paired_outcomes``). The native trainer and
    the RLlib runners validate through it."""
    from ecpo_train.core.rollout import collect_rollout

    with sampling_state_restored(policy):  # validating must not change the training run
        torch.manual_seed(seed)  # the same weights validate to the same episodes (token-sampling policies too)
        rollout = collect_rollout(envs, policy, list(task_ids), env_name=config.env_id,
                                  temperature=config.val_temperature, seed=seed, anchor_key=config.anchor_key,
                                  history_length=config.history_length, draws_seed=seed)
    exact = exact_success(policy, config.env_id, config.env_kwargs, task_ids, config.val_temperature,
                          history_length=config.history_length)
    return rollout.episodes, exact


def validation_metrics(episodes: Sequence[Any], exact: float | None) -> dict[str, float]:
    """``val/success`` and the other episode metrics, plus ``val/exact_success`` where it exists."""
    from ecpo_train.core.rollout import episode_metrics

    metrics = episode_metrics(episodes, prefix="val/")
    if exact is not None:
        metrics["val/exact_success"] = exact
    return metrics


@contextlib.contextmanager
def sampling_state_restored(policy: Any):
    """Put back every random stream a policy samples from (torch CPU/CUDA, a policy's own generator)."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    own = own_generator(policy)
    own_state = own.get_state() if own is not None else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        if own_state is not None:
            own.set_state(own_state)


def check_env_and_model(config: TrainConfig) -> None:
    """What a run's workers will build, checked in this process first (one error line, no worker started): the
    environment (its id and ``env_kwargs``, one ``gymnasium.make``) and, for an LLM policy, the model's config
    and tokenizer (no weights are loaded). The RLlib engine calls it before its runner actors start, whose own
    failure would surface as an actor's stack trace."""
    from ecpo_gym.group_workers import make_env

    env = make_env(config.env_id, config.env_kwargs, env_checker=True)
    try:
        task_lists(config, getattr(env.unwrapped, "task_ids", ()), env)
    finally:
        env.close()
    if policy_spec(config.policy).model != "causal-lm":
        return
    from transformers import AutoConfig, AutoTokenizer

    check_model_folder(config.model)
    model = model_folder(config.model)
    try:
        AutoConfig.from_pretrained(model)
        AutoTokenizer.from_pretrained(model)
    except (OSError, ValueError) as err:
        raise OSError(f"could not load the causal LM {shown(model)} ({' '.join(str(err).split())[:200]}): give a "
                      "local folder with config.json, weights and tokenizer files, or a Hugging Face hub id on a "
                      "machine with internet access") from None
