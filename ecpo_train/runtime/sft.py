"""Expert warm start (``ecpo sft``): supervised fine-tuning on the environments' own expert play.

A small model that cannot yet write the action format earns no reward in free generation, so RL has
nothing to work with. This module teaches the format first:

1. ``expert_demonstrations``: the environment's expert (``ecpo_gym.experts``, the one the leaderboard's
   ``ExpertAgent`` plays) plays episodes through the one episode loop
   (``rollout.collect_rollout``), and every step's ``StepContext`` is kept with the action the expert sent;
2. ``reply_rows`` (``policies/imitation.py``; the run's policy kind names its rows function in its
   ``Imitation``, ``policies/registry.py``): each step becomes the token rows a sampled step of the RL run has: the prompt of
   ``TransformersPolicy.encode_prompts`` (the run config's ``prompt_style`` and ``history_length``) and the
   reply ``parsing.format_reply`` writes for the expert's action, closed by the end-of-turn token;
3. ``fine_tune``: AdamW on the token-level cross-entropy of the reply tokens only (prompt tokens masked),
   computed by the learner's own ``TransformersPolicy.logprobs``, each optimizer step's rows run as forwards
   of at most ``max_tokens_per_micro_batch`` tokens whose gradients are summed (memory, below);
4. ``run_sft``: the above from a ``TrainConfig``; the model and tokenizer are saved with
   ``save_pretrained`` into a folder that ``ecpo train ... model=DIR`` loads.

With ``policy_mode: score`` the RL run never generates text: ``ScoringPolicy`` picks among the admissible
actions by their continuation log-likelihood after its own prompt (which ends in ``<action>``). Token-level
SFT on free-generation replies would train a different prompt and reply than the ones it scores, so there
``candidate_rows`` builds the scoring policy's own rows (prompt and every admissible candidate packed, the
expert's candidate as the chosen index) and ``fine_tune`` minimises ``-log pi(expert action | s)`` over the
candidate set, through the same ``ScoringPolicy.logprobs`` the learner uses (one "token" per step). The
exploration mixture (``explore_epsilon``) is left out while imitating: it is a fixed uniform share added
on top of the LM at RL time, and through it the cross-entropy's gradient would shrink exactly in the states
where the LM is most wrong.

Memory. Training activations cost 2-2.4 MB per token for SmolLM2-135M in float32 (30 layers), and a real
ALFWorld step is one ~1,300-token forward (a ~600-token prompt and ~60 admissible actions packed after it):
8 such rows in one forward held 18-19 GB. So a batch is cut into forwards of at most the run config's
``max_tokens_per_micro_batch`` tokens (``SFT_MAX_TOKENS`` where it sets none; counted as
``micro_batches.pack_micro_batches`` counts them, a longer row alone), each forward's summed
loss is backpropagated at once, and the summed gradient is divided by the batch's token count before
clipping: the same gradient as one forward of the whole batch, to float rounding. Decoder layers are also
checkpointed (recomputed in backward, about a third more compute; ``checkpointing=False`` turns it off): a
forward then keeps only each layer's input and one layer's activations at a time
(``benchmarks/results/candidate_memory.json`` measured both).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ecpo_gym.canonical import INVALID_ACTION
from ecpo_gym.kwargs import shown
from ecpo_train.core.micro_batches import pack_micro_batches
from ecpo_train.core.rollout import sent_action
from ecpo_train.policies.base import PolicyOutput, StepContext
from ecpo_train.policies.imitation import (  # noqa: F401  (each kind's rows, re-exported where they were)
    candidate_rows,
    end_of_turn_token,
    reply_rows,
    text_rows,
)
from ecpo_train.policies.imitation import expert_index as _expert_index  # noqa: F401
from ecpo_train.policies.parsing import parse_action
from ecpo_train.runtime.config import TrainConfig
from ecpo_train.runtime.limits import MAX_LR
from ecpo_train.runtime.policy_kinds import (  # noqa: F401  (the text policy's warm start, re-exported)
    TEXT_MAX_TOKENS,
    available_policies,
    policy_spec,
    text_policy_for,
)
from ecpo_train.runtime.progress import Progress


@dataclass
class Demonstration:
    """One expert step: what the policy would have seen, and the action the expert sent."""

    context: StepContext
    action: str


class _ExpertPlayer:
    """The environment's expert (``ecpo_gym.experts``) as the batched ``act`` ``collect_rollout`` calls, on one
    environment copy, keeping every step's context and the action it sent."""

    def __init__(self, env: Any, env_id: str) -> None:
        self.env, self.env_id = env, env_id
        self.expert: Callable[[int], str | None] | None = None
        self.steps: list[tuple[StepContext, Any]] = []

    def begin_episode(self, starts: list[tuple[str, dict[str, Any]]], *, seed: int) -> None:
        from ecpo_gym.experts import episode_expert

        ((_, info),) = starts
        try:
            self.expert = episode_expert(self.env, str(info.get("task_id", "")))
        except TypeError as err:  # no expert on this environment
            raise ValueError(f"{self.env_id} has no expert to imitate ({err})") from None

    def act(self, contexts: Sequence[StepContext], temperature: float = 1.0) -> PolicyOutput:
        assert self.expert is not None, "begin_episode first"
        actions = [self.expert(ctx.step_count) for ctx in contexts]
        self.steps.extend(zip(contexts, actions))
        return PolicyOutput(actions=actions, responses=["" for _ in contexts],
                            prompt_ids=[[] for _ in contexts], response_ids=[[] for _ in contexts],
                            logprobs=[[] for _ in contexts])


def expert_demonstrations(env_id: str, *, episodes: int, task_ids: Sequence[str] | None = None,
                          env_kwargs: dict | None = None, seed: int = 0, history_length: int | None = None,
                          on_episode: Callable[[int], None] | None = None) -> list[Demonstration]:
    """The steps of ``episodes`` expert episodes on ``env_id``; tasks in a seeded shuffled order, cycled.

    Episode ``k`` is reset with ``seed + k``. Steps where the expert had no action (past the end of its
    plan) are left out. ``ValueError`` when the environment has no expert. ``on_episode(steps)`` is called
    after each episode with the steps it kept.
    """
    import ecpo_gym  # noqa: F401  (registers the ids)
    from ecpo_gym.group import GroupVectorEnv
    from ecpo_gym.group_workers import make_env
    from ecpo_train.core.rollout import collect_rollout

    env = make_env(env_id, env_kwargs)
    envs = GroupVectorEnv(lambda env=env: env, num_groups=1, group_size=1)  # owns and closes env
    try:
        tasks = [str(t) for t in (task_ids or envs.task_ids)]
        if not tasks:
            raise ValueError(f"{env_id} has no tasks to play")
        tasks = [tasks[i] for i in np.random.default_rng(seed).permutation(len(tasks))]
        demonstrations: list[Demonstration] = []
        for k in range(episodes):
            player = _ExpertPlayer(env, env_id)
            collect_rollout(envs, player, [tasks[k % len(tasks)]], env_name=env_id, temperature=0.0,
                            seed=seed + k, history_length=history_length,
                            on_reset=functools.partial(player.begin_episode, seed=seed + k))
            kept = [Demonstration(ctx, action) for ctx, action in player.steps
                    if sent_action(action) != INVALID_ACTION]
            demonstrations += kept
            if on_episode is not None:
                on_episode(len(kept))
        return demonstrations
    finally:
        envs.close()


def reply_cross_entropy(policy: Any, prompts: Sequence[Sequence[int]],
                        replies: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(summed negative log-likelihood, token count)`` of the reply tokens given their prompts."""
    token_logp, mask, _ = policy.logprobs(prompts, replies, temperature=1.0)
    return -(token_logp * mask).sum(), mask.sum()


SFT_MAX_TOKENS = 4096  # tokens of one forward where the config bounds none (module docstring, memory)


def row_tokens(prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[int]]) -> np.ndarray:
    """Each row's forward length: prompt (for a scoring row: prompt and packed candidates) plus reply."""
    return np.asarray([len(p) + len(r) for p, r in zip(prompts, replies)], dtype=np.int64)


def forward_chunks(rows: Sequence[int], tokens: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """``rows`` cut into forwards of at most ``max_tokens`` padded tokens (a longer row alone)."""
    rows = np.asarray(rows, dtype=np.int64)
    return pack_micro_batches(rows, tokens, max(len(rows), 1), max_tokens)


@torch.no_grad()
def mean_reply_loss(policy: Any, prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[int]],
                    max_tokens: int = SFT_MAX_TOKENS, progress: Progress | None = None) -> float:
    """Token-level cross-entropy of the replies (nats per reply token)."""
    total, count = 0.0, 0.0
    for chunk in forward_chunks(range(len(prompts)), row_tokens(prompts, replies), max_tokens):
        nll, tokens = reply_cross_entropy(policy, [prompts[i] for i in chunk], [replies[i] for i in chunk])
        total, count = total + float(nll), count + float(tokens)
        if progress is not None:
            for _ in chunk:
                progress.advance()
    return total / max(count, 1.0)


def accumulate_gradient(policy: Any, prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[int]],
                        rows: Sequence[int], max_tokens: int) -> tuple[float, float]:
    """``(summed NLL, reply-token count)`` of ``rows``, leaving in ``.grad`` the gradient of their mean NLL
    per reply token, computed in forwards of at most ``max_tokens`` tokens (module docstring, memory)."""
    parameters = [p for p in policy.model.parameters() if p.requires_grad]
    tokens = row_tokens(prompts, replies)
    total, count = 0.0, 0.0
    for chunk in forward_chunks(rows, tokens, max_tokens):
        nll, n = reply_cross_entropy(policy, [prompts[i] for i in chunk], [replies[i] for i in chunk])
        nll.backward()
        total, count = total + float(nll.detach()), count + float(n)
    for parameter in parameters:
        if parameter.grad is not None:
            parameter.grad.div_(max(count, 1.0))
    return total, count


def fine_tune(policy: Any, prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[int]], *, epochs: int,
              lr: float, batch_size: int = 8, weight_decay: float = 0.0, max_grad_norm: float = 1.0,
              seed: int = 0, max_tokens: int = SFT_MAX_TOKENS, progress: Progress | None = None) -> list[float]:
    """AdamW on the reply tokens' cross-entropy, rows shuffled each epoch; the mean loss of each epoch.

    Each batch's loss is its summed reply-token NLL over its reply-token count: every reply token of the
    batch weighs the same, so a long reply is not down-weighted against a short one.
    """
    parameters = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay)
    order_rng = torch.Generator().manual_seed(seed)
    epoch_losses = []
    policy.model.train()
    try:
        for epoch in range(epochs):
            total, count = 0.0, 0.0
            order = torch.randperm(len(prompts), generator=order_rng).tolist()
            for start in range(0, len(order), batch_size):
                optimizer.zero_grad(set_to_none=True)
                nll, tokens = accumulate_gradient(policy, prompts, replies, order[start : start + batch_size],
                                                  max_tokens)
                torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
                optimizer.step()
                total, count = total + nll, count + tokens
                if progress is not None:
                    progress.advance(f"epoch {epoch + 1}/{epochs}, loss {total / max(count, 1.0):.3f}")
            epoch_losses.append(total / max(count, 1.0))
    finally:
        policy.model.eval()
    return epoch_losses


@torch.no_grad()
def well_formed_rate(policy: Any, contexts: Sequence[StepContext], batch_size: int = 16) -> float:
    """Fraction of greedy replies that ``parse_action`` accepts (whatever action they name)."""
    parsed = 0
    for start in range(0, len(contexts), batch_size):
        chunk = list(contexts[start : start + batch_size])
        output = policy.act(chunk, temperature=0.0)
        parsed += sum(parse_action(text, ctx.env_name or policy.env_name) is not None
                      for ctx, text in zip(chunk, output.responses))
    return parsed / max(len(contexts), 1)


# expert episodes are played and kept in memory before the first update: a bound that keeps that phase short
MAX_SFT_EPISODES = 10_000
MAX_SFT_EPOCHS = 1_000  # passes over the same expert steps: past this, memorised long before
SFT_SUMMARY = "sft.json"  # what marks a folder as an sft output (which a later sft may replace)


def check_sft_settings(episodes: int, epochs: int, lr: float, batch_size: int) -> None:
    for name, value in (("episodes", episodes), ("epochs", epochs), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name.replace('_', '-')} {shown(value)} is invalid: it must be an integer >= 1")
    if episodes > MAX_SFT_EPISODES:
        raise ValueError(f"--episodes {episodes} is invalid: at most {MAX_SFT_EPISODES} (the expert plays every "
                         "episode before the first update)")
    if epochs > MAX_SFT_EPOCHS:
        raise ValueError(f"--epochs {epochs} is invalid: at most {MAX_SFT_EPOCHS} passes over the expert steps")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and 0 < lr <= MAX_LR):
        raise ValueError(f"--lr {shown(lr)} is invalid: it must be a number in (0, {MAX_LR:g}]")


def run_sft(config: TrainConfig, *, episodes: int, epochs: int, lr: float, out: str | Path,
            batch_size: int = 8, checkpointing: bool = True) -> dict[str, Any]:
    """Expert SFT of ``config.model`` on ``config.env_id``; saves the model and tokenizer to ``out``.

    The prompts are those of ``config``'s RL run (``prompt_style``, ``history_length``, ``max_prompt_length``);
    the update is full fine-tuning (``lora`` is not applied), of the free-generation policy's reply tokens, or,
    with ``policy_mode: score``, of the scoring policy's choice among the admissible actions (module
    docstring). Memory (module docstring): a forward holds at most ``config.max_tokens_per_micro_batch``
    tokens (the RL update's own bound; ``SFT_MAX_TOKENS`` where the config sets none) and decoder layers are
    checkpointed unless ``checkpointing=False``. ``config.progress`` shows the expert episodes, the loss passes
    and the optimizer steps (in a log, plain lines as ``runtime/progress.py`` spaces them). Torch runs on
    ``config.threads`` threads, as the RL run does. Returns the summary also written to ``out/sft.json``.
    """
    check_sft_settings(episodes, epochs, lr, batch_size)
    if policy_spec(config.policy).imitation is None:  # (the kind declares how expert play trains it, or nothing)
        kinds = [f"policy={name}" for name in available_policies() if policy_spec(name).imitation is not None]
        raise ValueError(f"policy={config.policy}: ecpo sft trains a policy kind that declares a warm start "
                         f"({', '.join(kinds)}), this one has none")
    if not checkpointing and "gradient_checkpointing" not in policy_spec(config.policy).settings:
        readers = [f"policy={name}" for name in available_policies()
                   if "gradient_checkpointing" in policy_spec(name).settings]
        raise ValueError(f"--no-checkpointing: policy={config.policy} has no decoder layers to recompute (only "
                         f"{', '.join(readers)}), so it would be ignored; leave it out")
    out = check_sft_out(out, config.model)
    from ecpo_train.runtime.run_lock import acquire_run_lock

    lock = acquire_run_lock(out, "sft", label=f"--out {str(out)[:200]}")  # one sft per output folder
    try:
        check_sft_out(out, config.model)  # (again, under the lock: what another sft wrote meanwhile counts)
        return _run_sft(config, episodes=episodes, epochs=epochs, lr=lr, out=out, batch_size=batch_size,
                        checkpointing=checkpointing)
    finally:
        lock.release()


def _run_sft(config: TrainConfig, *, episodes: int, epochs: int, lr: float, out: Path, batch_size: int,
             checkpointing: bool) -> dict[str, Any]:
    """:func:`run_sft`'s work, under ``out``'s lock: the kind's ``Imitation`` (``policies/registry.py``) says which
    policy trains on which rows and how it is saved."""
    from ecpo_train.runtime.threads import apply_threads

    apply_threads(config.threads)  # the run's thread rule (threads.py): the warm start of a preset runs as its RL run

    torch.manual_seed(config.seed)
    checkpointing = config.gradient_checkpointing or checkpointing
    # (an LLM's policy is built here, before the expert plays: a model that cannot load fails first)
    imitation = policy_spec(config.policy).imitation(config, checkpointing)
    # forwards of at most this many tokens (the text policy: a whole batch, its rows are a few hundred ids)
    max_tokens = config.max_tokens_per_micro_batch or imitation.max_tokens or SFT_MAX_TOKENS
    with Progress(config.progress, episodes, 0, "expert episodes") as progress:
        demonstrations = expert_demonstrations(config.env_id, episodes=episodes, task_ids=config.train_tasks,
                                               env_kwargs=config.env_kwargs, seed=config.seed,
                                               history_length=config.history_length,
                                               on_episode=lambda steps: progress.advance(f"{steps} steps"))
        if not demonstrations:
            raise ValueError(f"the expert of {config.env_id} took no step in {episodes} episode(s)")
        policy, prompts, replies, left_out = imitation.rows(demonstrations)
        if not prompts:
            raise ValueError(f"no expert action of {config.env_id} was among the admissible actions")
        progress.stage("loss before", len(prompts))
        loss_before = mean_reply_loss(policy, prompts, replies, max_tokens, progress)
        progress.stage("optimizer steps", epochs * math.ceil(len(prompts) / batch_size))
        epoch_losses = fine_tune(policy, prompts, replies, epochs=epochs, lr=lr, batch_size=batch_size,
                                 weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
                                 seed=config.seed, max_tokens=max_tokens, progress=progress)
        progress.stage("loss after", len(prompts))
        loss_after = mean_reply_loss(policy, prompts, replies, max_tokens, progress)
        if not math.isfinite(loss_after) or not all(bool(torch.isfinite(p.detach()).all())
                                                    for p in policy.parameters()):
            raise ValueError(f"the fine-tuning made the weights or the loss nan or infinite (lr={lr}, weight_decay="
                             f"{config.weight_decay}): lower them; nothing was written to --out")
    from ecpo_train.runtime.models import weights_sha256

    summary = {  # the base model by its weights too: what a run from this output compares (resume.warm_start)
        "model": config.model, "model_weights_sha256": weights_sha256(config.model),
        "env_id": config.env_id, "env_kwargs": config.env_kwargs,
        "prompt_style": config.prompt_style, "history_length": config.history_length,
        "policy": config.policy,
        "objective": imitation.objective,
        "episodes": episodes, "steps": len(prompts), "steps_not_admissible": left_out,
        "reply_tokens": sum(len(r) for r in replies),
        "epochs": epochs, "lr": lr, "batch_size": batch_size, "max_tokens": max_tokens,
        "checkpointing": checkpointing,
        "loss_before": loss_before, "epoch_losses": epoch_losses, "loss_after": loss_after,
    }
    from ecpo_train.files.atomic import library_write_errors, replaced_folder
    from ecpo_train.files.checksums import CHECKSUM_FILE, write_folder_checksums
    from ecpo_train.runtime.run_dir import LOCK_FILE

    # an earlier output stays until this one is whole; the lock file is carried over (still held)
    with replaced_folder(out, carry=(LOCK_FILE,)) as partial, library_write_errors(out):
        imitation.save(policy, partial)
        # what a later sft replaces: every file written here, the summary and the checksums written last
        summary["files"] = sorted({*(entry.name for entry in partial.iterdir()), SFT_SUMMARY, CHECKSUM_FILE})
        (partial / SFT_SUMMARY).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        write_folder_checksums(partial)  # swapped in with the folder: checked wherever it is loaded
    return summary


def check_sft_out(out: str | Path, model: str) -> Path:
    """``--out`` as a folder sft may write, or a ``ValueError``: never an empty path (the current folder), the
    input model's own folder, a link, or a folder holding anything an earlier sft did not write (an earlier sft
    output, every file of it listed in its ``sft.json``, is replaced whole; its lock file aside)."""
    import os

    from ecpo_train.files.atomic import refuse_links
    from ecpo_train.runtime.run_dir import LOCK_FILE, check_writable_folder

    if not str(out).strip():
        raise ValueError("--out is empty: give the folder to write the fine-tuned model to")
    path = Path(out).expanduser()
    check_writable_folder(path, f"--out {shown(str(out))}")
    if path.is_symlink():
        raise ValueError(f"--out {out} is a symlink: give the folder itself (nothing is written through a link)")
    model_folder = Path(os.path.expanduser(model))
    if model and model_folder.exists() and path.exists() and path.resolve() == model_folder.resolve():
        raise ValueError(f"--out {out} is the input model's folder: the base model would be overwritten; give "
                         "a new folder")
    if not path.is_dir():
        return path
    entries = sorted(entry.name for entry in path.iterdir() if entry.name != LOCK_FILE)
    if not entries:
        return path
    if not (path / SFT_SUMMARY).is_file():
        raise ValueError(f"--out {out} holds files that are not an sft output (no {SFT_SUMMARY}): give an empty "
                         "or new folder, or delete its contents first")
    try:
        refuse_links(path / SFT_SUMMARY)
        listed = json.loads((path / SFT_SUMMARY).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        listed = None
    if not isinstance(listed, list):
        raise ValueError(  # noqa: TRY004
            f"--out {out}: its {SFT_SUMMARY} lists no files sft wrote (an older version, or not sft's): it is not "
            "replaced; give a new folder, or delete this one first")
    others = [name for name in entries if name not in listed]
    if others:
        raise ValueError(f"--out {out} holds {', '.join(others[:3])}{'...' if len(others) > 3 else ''}, which the "
                         f"earlier sft did not write (its {SFT_SUMMARY} does not list it): replacing the folder "
                         "would delete it; move it out, or give a new folder")
    return path
