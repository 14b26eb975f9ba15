"""The admissible-action scoring policy: an LLM that picks among the environment's admissible actions.

Free generation asks a small LM to write a well-formed action; SmolLM2-135M almost never does, so every
reply is invalid, every return equal and every advantage zero. Here the LM instead *scores* each
admissible action ``a`` as a continuation of the step's prompt (the same template as free generation,
with the assistant turn opened by ``<action>``):

    score(a | s) = sum_j log p_LM(c_j | prompt(s), c_<j),   c = tokens of ``a + "</action>"`` + EOS
    pi(a | s)    = softmax_a(score(a | s) / T)

and samples from ``pi`` (``policies.choose``, the one candidate chooser: a uniform from the step's
common-random-number draw or the policy's own seeded generator, by inverse CDF; ``T <= 0`` is greedy). The sampled
action is always admissible. ``logprobs`` recomputes the same
candidate distribution with gradients, so the clipped objective (eq. ecpo_objective) and the KL term work
unchanged: the ratio is ``pi_theta(a|s) / pi_old(a|s)`` over the candidate set, one "token" per step.

Where this departs from the paper: the paper's policy writes free text (reasoning, then an action tag);
here there is no reasoning text and the action space is the admissible set. This is the usual way small
LMs are trained in text games. Environments whose admissible actions hold a free slot (WebShop's
``search[<query>]``, search-QA's ``<search> query </search>``) do not fit: a candidate containing
``<...>`` placeholders is filled with the task instruction (WebShop: search for the instruction text),
and an env that lists no admissible actions at all (search-QA) is refused with a clear error.

Cost: every row's prompt is run once together with all its candidates in one sequence, each candidate
attending to the prompt and to itself only (a 4D "tree" attention mask, positions restarting after the
prompt), and the LM head runs only on candidate tokens (forward and backward). Identical (prompt, candidates)
pairs -- all N copies of a group at the first step, and every copy in the same state when the history is
short -- are computed once, both when sampling and in the update (where ``micro_batches.pack_micro_batches`` keeps
the rows of one context in one micro-batch). Contexts of different lengths are not padded to the longest:
they are packed first-fit into sequences as long as the longest context, each its own block of the mask.

Exploration (``explore_epsilon`` = eps > 0): the policy is the mixture ``(1 - eps) pi + eps / |A|``. The
untrained LM's prior over ALFWorld's admissible actions follows word overlap and is worse than uniform; the
mixture keeps every action's probability at least ``eps / |A|``. It is the policy everywhere: sampling, the
learner's log-probs (so the ratio and the KL are those of the mixture, exactly) and exact validation (a greedy
choice, ``T <= 0``, is the highest score's, without the mixture).

A stored row packs its candidates into ``prompt_ids`` (``prompt + [-1] + c_0 + [-1] + c_1 ...``; -1 is no
token id) and its ``response_ids`` is ``[index of the chosen candidate]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from ecpo_train.policies.base import PolicyOutput, StepContext
from ecpo_train.policies.choose import choose, distribution, log_policy
from ecpo_train.policies.llm import TransformersPolicy

SEPARATOR = -1
ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"
_PLACEHOLDER = re.compile(r"<[^<>]*>")


def pack_candidates(prompt: Sequence[int], candidates: Sequence[Sequence[int]]) -> list[int]:
    """One stored row: the prompt's ids, then each candidate's ids after a ``SEPARATOR``."""
    packed = list(prompt)
    for cand in candidates:
        packed.append(SEPARATOR)
        packed.extend(cand)
    return packed


def unpack_candidates(packed: Sequence[int]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Inverse of :func:`pack_candidates`."""
    parts: list[list[int]] = [[]]
    for token in packed:
        if token == SEPARATOR:
            parts.append([])
        else:
            parts[-1].append(int(token))
    if len(parts) < 2:
        raise ValueError("row holds no candidates: it was not written by the scoring policy")
    return tuple(parts[0]), tuple(tuple(p) for p in parts[1:])


def pack_items(lengths: Sequence[int]) -> list[list[int]]:
    """First-fit decreasing: the items (by index) grouped into sequences no longer than the longest item, so a
    batch of contexts of unequal lengths costs about the sum of their lengths, not rows x longest."""
    width = max(lengths)
    rows: list[list[int]] = []
    free: list[int] = []
    for item in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for row, room in enumerate(free):
            if lengths[item] <= room:
                rows[row].append(item)
                free[row] -= lengths[item]
                break
        else:
            rows.append([item])
            free.append(width - lengths[item])
    return rows


def fill_placeholders(action: str, task: str) -> str:
    """An admissible action with a free slot (``search[<query>]``) gets the task instruction in the slot."""
    return _PLACEHOLDER.sub(lambda _: task.strip() or "anything", action) if "<" in action else action


def fills_slots(action: str, candidate: str) -> bool:
    """Whether ``action`` is ``candidate`` with each free slot (``search[<query>]``) filled by some text."""
    if "<" not in candidate:
        return action == candidate
    pattern = ".+".join(re.escape(part) for part in _PLACEHOLDER.split(candidate))
    return re.fullmatch(pattern, action, flags=re.DOTALL) is not None


def candidate_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                     at_rows: torch.Tensor, at_cols: torch.Tensor) -> torch.Tensor:
    """LM-head logits ``[n, vocab]`` at ``(at_rows, at_cols)`` of a tree-masked forward. A model sharded by
    ``ecpo_train.runtime.distributed`` carries this as an FSDP forward method (``sharded_candidate_logits``: the
    root's weights are gathered around it) and that is used instead."""
    sharded = model.__dict__.get("sharded_candidate_logits")
    if sharded is not None:
        return sharded(ids, mask, positions, at_rows, at_cols)
    return compute_candidate_logits(model, ids, mask, positions, at_rows, at_cols)


def compute_candidate_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                             at_rows: torch.Tensor, at_cols: torch.Tensor) -> torch.Tensor:
    hidden = model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
    return model.get_output_embeddings()(hidden[at_rows, at_cols])


class ScoringPolicy(TransformersPolicy):
    """A causal LM choosing among admissible actions by their continuation log-likelihood (module docstring)."""

    policy_mode = "score"

    def __init__(self, *args, seed: int = 0, **kwargs) -> None:
        super().__init__(*args, seed=seed, **kwargs)
        self.generator = torch.Generator().manual_seed(int(seed))  # the choices' own stream (policies.choose)

    def prompt_text(self, ctx: StepContext) -> str:
        return super().prompt_text(ctx) + ACTION_OPEN

    def candidate_ids(self, actions: Sequence[str]) -> list[list[int]]:
        texts = [a + ACTION_CLOSE for a in actions]
        eos = int(self.eos_token_ids[0])
        return [list(ids) + [eos] for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    # ------------------------------------------------------------------ scores
    def candidate_scores(self, items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
                         model: torch.nn.Module | None = None) -> list[torch.Tensor]:
        """Summed log-prob of every candidate given its prompt, for each ``(prompt, candidates)`` item.

        One forward of ``model`` (default: the trained model) over the items packed into sequences
        (``pack_items``) with a tree mask per item; gradients flow when enabled.
        """
        if not items:
            return []
        packed = pack_items([len(p) + sum(len(c) for c in cands) for p, cands in items])
        width = max(len(p) + sum(len(c) for c in cands) for p, cands in items)
        ids = torch.full((len(packed), width), self.pad_token_id, dtype=torch.long)
        pos_ids = torch.zeros(len(packed), width, dtype=torch.long)
        mask = torch.zeros(len(packed), 1, width, width, dtype=torch.bool)
        at_rows, at_cols, targets, owners = [], [], [], []  # per item, in item order
        placed: dict[int, tuple[int, int]] = {}
        for row, members in enumerate(packed):
            start = 0
            for item in members:
                placed[item] = (row, start)
                start += len(items[item][0]) + sum(len(c) for c in items[item][1])
            mask[row, 0, torch.arange(start, width), torch.arange(start, width)] = True  # padding sees itself
        for item, (prompt, cands) in enumerate(items):
            row, o = placed[item]
            p = len(prompt)
            ids[row, o : o + p] = torch.as_tensor(prompt)
            pos_ids[row, o : o + p] = torch.arange(p)
            mask[row, 0, o : o + p, o : o + p] = torch.ones(p, p, dtype=torch.bool).tril()
            start, gather, owner = o + p, [], []
            for k, cand in enumerate(cands):
                end = start + len(cand)
                ids[row, start:end] = torch.as_tensor(cand)
                pos_ids[row, start:end] = torch.arange(p, p + len(cand))
                mask[row, 0, start:end, o : o + p] = True
                mask[row, 0, start:end, start:end] = torch.ones(len(cand), len(cand), dtype=torch.bool).tril()
                # the token c_j is predicted by the logits at c_{j-1}, and c_0 by the prompt's last position
                gather.extend([o + p - 1] + list(range(start, end - 1)))
                owner.extend([k] * len(cand))
                start = end
            at_rows.append(torch.full((len(gather),), row, dtype=torch.long))
            at_cols.append(torch.as_tensor(gather, dtype=torch.long))
            targets.append([t for cand in cands for t in cand])
            owners.append(owner)
        device = self.device
        picked = candidate_logits(self.model if model is None else model, ids.to(device), mask.to(device),
                                  pos_ids.to(device), torch.cat(at_rows).to(device), torch.cat(at_cols).to(device)
                                  ).float()
        all_targets = torch.as_tensor([t for target in targets for t in target], device=device)
        token_logp = torch.log_softmax(picked, dim=-1).gather(-1, all_targets.unsqueeze(-1)).squeeze(-1)
        scores, offset = [], 0
        for (_, cands), owner in zip(items, owners):
            total = torch.zeros(len(cands), dtype=token_logp.dtype, device=device)
            scores.append(total.index_add(0, torch.as_tensor(owner, device=device),
                                          token_logp[offset : offset + len(owner)]))
            offset += len(owner)
        return scores

    def _unique_scores(self, items: Sequence[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]],
                       model: torch.nn.Module | None = None, batch_size: int | None = None
                       ) -> tuple[list[torch.Tensor], list[int]]:
        """Scores of the distinct items (in batches of ``batch_size`` distinct prompts, default
        ``score_batch_size``) by ``model`` (default: the trained model) and each item's slot."""
        slot: dict[tuple, int] = {}
        order = [slot.setdefault(item, len(slot)) for item in items]
        distinct = list(slot)
        scores: list[torch.Tensor] = []
        batch_size = batch_size or self.score_batch_size
        for i in range(0, len(distinct), batch_size):
            scores += self.candidate_scores(distinct[i : i + batch_size], model)
        return scores, order

    score_batch_size = 8
    # sampling (no gradients) when decoding is not eager: at least this many distinct contexts per packed forward
    # (a 16 x 8 batch's in one: fewer launches per decision, the GPU's host-bound cost), on the sampling weights
    # (bf16 on CUDA under mixed_precision=bf16; policies/decoding.py)
    sample_score_batch_size = 128
    explore_epsilon = 0.0  # module docstring: the policy is (1 - eps) softmax(score / T) + eps / |A|

    def log_policy(self, score: torch.Tensor, temperature: float) -> torch.Tensor:
        """log pi(a | s) over one context's candidates: the tempered softmax of the scores, mixed with the
        uniform distribution when ``explore_epsilon > 0`` (``choose.log_policy``)."""
        return log_policy(score, temperature, self.explore_epsilon)

    # ------------------------------------------------------------------ sampling
    def _scored_contexts(self, contexts: Sequence[StepContext]) -> list[tuple[list[str], tuple, torch.Tensor]]:
        """For each context: its candidate actions (placeholders filled), its ``(prompt, candidates)`` item and the
        candidates' scores (each distinct item computed once)."""
        self.model.eval()
        prompts = self.encode_prompts(contexts)
        items, actions_of = [], []
        for ctx, prompt in zip(contexts, prompts):
            if not ctx.admissible_actions:
                raise ValueError(
                    f"policy_mode=score picks among admissible actions, but {ctx.env_name or self.env_name} lists "
                    "none at this step (search-QA's actions are free text): use policy_mode=generate")
            actions = [fill_placeholders(a, ctx.task) for a in ctx.admissible_actions]
            actions_of.append(actions)
            items.append((tuple(prompt), tuple(tuple(c) for c in self.candidate_ids(actions))))
        if self.decoding == "eager":
            scores, order = self._unique_scores(items)
        else:
            scores, order = self._unique_scores(items, self.sampling_model(),
                                                max(self.score_batch_size, self.sample_score_batch_size))
        return [(actions, item, scores[slot].float().cpu()) for actions, item, slot in zip(actions_of, items, order)]

    @torch.no_grad()
    def act(self, contexts: Sequence[StepContext], temperature: float = 1.0) -> PolicyOutput:
        out = PolicyOutput(actions=[], responses=[])
        for ctx, (actions, item, score) in zip(contexts, self._scored_contexts(contexts) if contexts else []):
            index, logp = choose(score, temperature, draw=ctx.draw, generator=self.generator,
                                 epsilon=self.explore_epsilon)
            out.actions.append(actions[index])
            out.responses.append(actions[index])
            out.prompt_ids.append(pack_candidates(*item))
            out.response_ids.append([index])
            out.logprobs.append([float(logp[index])])
        return out

    @torch.no_grad()
    def action_distributions(self, contexts: Sequence[StepContext], temperature: float) -> list[dict[str, float]]:
        """``pi(a | s)`` over each context's admissible actions (for exact DP validation)."""
        out = []
        for ctx, (_, _, score) in zip(contexts, self._scored_contexts(contexts)):
            probs = distribution(score, temperature, self.explore_epsilon)
            out.append(dict(zip(ctx.admissible_actions, probs.tolist())))
        return out

    # ------------------------------------------------------------------ learner side
    def logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        items = [unpack_candidates(p) for p in prompt_ids]
        scores, order = self._unique_scores(items)
        logps = [self.log_policy(s, temperature) for s in scores]
        chosen = torch.stack([logps[slot][int(resp[0])] for slot, resp in zip(order, response_ids)])
        token_logp = chosen.unsqueeze(-1)
        mask = torch.ones_like(token_logp)
        entropy = None
        if with_entropy:
            entropy = torch.stack([-(logps[slot].exp() * logps[slot]).sum() for slot in order]).unsqueeze(-1)
        return token_logp, mask, entropy
