"""Expert steps as each policy kind's training rows (``ecpo sft``, ``runtime/sft.py``).

A demonstration is one expert step: ``demonstration.context`` (the ``StepContext`` the policy would have seen) and
``demonstration.action`` (what the expert sent). Each function turns a list of them into the rows a sampled step of
the RL run holds for one kind of policy, so that fine-tuning trains the very prompt and reply the run scores: the
free-generation LLM's reply tokens (``reply_rows``), the scoring LLM's packed candidates (``candidate_rows``), the
text policy's step rows (``text_rows``). A policy kind names the one it uses in its ``Imitation``
(``policies/registry.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_train.policies.parsing import format_reply
from ecpo_train.policies.scoring import fill_placeholders, fills_slots, pack_candidates


def end_of_turn_token(policy: Any) -> int:
    """The token that closes a reply: the model's first generation end-of-sequence id (a chat model lists
    its end-of-turn token there, e.g. ``<|im_end|>``), else the tokenizer's."""
    eos = policy.model.generation_config.eos_token_id
    first = eos[0] if isinstance(eos, list) and eos else eos
    return int(first if first is not None else policy.tokenizer.eos_token_id)


def reply_rows(policy: Any, demonstrations: Sequence[Any]) -> tuple[list[list[int]], list[list[int]]]:
    """``(prompt_ids, reply_ids)`` per step, the rows a sampled step of the RL run would hold.

    ``ValueError`` when a reply is longer than the policy's ``max_response_length`` (it could never be
    generated whole).
    """
    prompts = policy.encode_prompts([d.context for d in demonstrations])
    end = end_of_turn_token(policy)
    replies = []
    for demo in demonstrations:
        text = format_reply(demo.action, demo.context.env_name or policy.env_name)
        ids = list(policy.tokenizer(text, add_special_tokens=False)["input_ids"]) + [end]
        if len(ids) > policy.max_response_length:
            raise ValueError(f"the expert reply {shown(text)} is {len(ids)} tokens, over max_response_length="
                             f"{policy.max_response_length}: raise max_response_length")
        replies.append(ids)
    return prompts, replies


def expert_index(action: str, admissible: Sequence[str]) -> int | None:
    """Index of the expert's action among the admissible ones; an action that fills a free slot
    (``search[red shoes]`` for ``search[<query>]``) matches the slot's candidate. ``None`` if none matches."""
    if action in admissible:
        return list(admissible).index(action)
    return next((index for index, candidate in enumerate(admissible) if fills_slots(action, candidate)), None)


def candidate_rows(policy: Any, demonstrations: Sequence[Any]
                   ) -> tuple[list[list[int]], list[list[int]], int]:
    """``(packed rows, [[expert index]], steps left out)``: the rows a ``ScoringPolicy`` step stores, with the
    expert's candidate as the chosen one (``runtime/sft.py``'s docstring). Steps whose expert action is not among the
    admissible ones cannot be scored and are left out (counted)."""
    rows, chosen, left_out = [], [], 0
    kept = []
    for demo in demonstrations:
        index = expert_index(demo.action, demo.context.admissible_actions or [])
        if index is None:
            left_out += 1
        else:
            kept.append((demo, index))
    prompts = policy.encode_prompts([demo.context for demo, _ in kept])
    for (demo, index), prompt in zip(kept, prompts):
        actions = [fill_placeholders(a, demo.context.task) for a in demo.context.admissible_actions]
        rows.append(pack_candidates(prompt, policy.candidate_ids(actions)))
        chosen.append([index])
    return rows, chosen, left_out


def text_rows(policy: Any, demonstrations: Sequence[Any]) -> tuple[list[list[int]], list[list[int]], int]:
    """``(rows, [[expert index]], steps left out)``: the rows a ``TextPolicy`` step stores (``TextPolicy.step_row``),
    with the expert's command as the chosen one among the policy's candidates (``TextPolicy.candidates``: the
    admissible commands, or the open command set); steps whose expert action is not among them are left out."""
    rows, chosen, left_out = [], [], 0
    for demo in demonstrations:
        index = expert_index(demo.action, policy.candidates(demo.context))
        if index is None:
            left_out += 1
            continue
        rows.append(policy.step_row(demo.context))
        chosen.append([index])
    return rows, chosen, left_out
