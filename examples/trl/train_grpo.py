"""Train a small model with TRL's GRPOTrainer on an ECPO environment served by ``ecpo serve`` (README.md here).

Each training row is one episode, played through OpenEnv's client: the first prompt is the environment's first
observation (the ``compact`` template of ``prompts/``), then every turn the model replies, the reply's
``<action>`` goes to the server, and the next observation comes back as the next user message. The completion is
every turn's generated tokens with the environment's tokens between them (``env_mask`` 0 on those); the reward
is the episode's return from the server. With ``--credit ecpo`` the rows also carry each turn's state key,
canonical action and step reward, and ``ECPOGRPOTrainer`` gives each turn ECPO's advantage instead of GRPO's one
per episode.

    python examples/trl/train_grpo.py --url http://127.0.0.1:8000 --model MODEL_DIR --steps 4
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

CREDITS = ("grpo", "ecpo")
ANSWER_FIELD = "env_return"
MARK = "\u2063ECPO-REPLY\u2063"  # stands for a reply while the chat template is measured


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the ecpo serve server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", required=True, help="a transformers model folder (ecpo models pull / tiny)")
    parser.add_argument("--env-id", default="ecpo/DivergentAnchor-v0",
                        help="the id the server serves (picks the reply parser)")
    parser.add_argument("--credit", choices=CREDITS, default="ecpo", help="ecpo: per-turn ECPO advantages "
                        "(ECPOGRPOTrainer); grpo: TRL's GRPOTrainer as it is")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps")
    parser.add_argument("--tasks", type=int, default=4, help="distinct reset seeds in the dataset")
    parser.add_argument("--num-generations", type=int, default=2, help="episodes per task in a GRPO group")
    parser.add_argument("--batch-size", type=int, default=4, help="episodes per optimizer step")
    parser.add_argument("--max-turns", type=int, default=4, help="turns per episode at most")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="tokens a turn may generate")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="trl_grpo_out", help="TRL's output folder")
    parser.add_argument("--log-file", default=None, help="write each step's loss and rewards here (JSON lines)")
    args = parser.parse_args(argv)
    for name in ("steps", "tasks", "num_generations", "batch_size", "max_turns", "max_new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.num_generations < 2:
        parser.error("--num-generations must be >= 2 (GRPO compares episodes of one task)")
    if args.batch_size % args.num_generations:
        parser.error("--batch-size must be a multiple of --num-generations")
    if not (math.isfinite(args.temperature) and args.temperature > 0):
        parser.error("--temperature must be > 0")
    return args


def task_prompt(seed: int) -> list[dict[str, str]]:
    """The dataset's prompt of a task: only a name; the rollout replaces it with the environment's observation."""
    return [{"role": "user", "content": f"episode seed {seed}"}]


def seed_of(prompt: Any) -> int:
    content = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
    return int(str(content).rsplit(" ", 1)[-1])


def user_message(env_id: str, observation: Any) -> str:
    from ecpo_train.policies.prompting import render_prompt

    return render_prompt(env_id, task=str(observation.info.get("task", "")), step_count=0, history=[],
                         observation=observation.text, admissible_actions=observation.admissible_actions,
                         history_length=0, style="compact")


def env_turn_text(tokenizer: Any, reply_end: str, message: str) -> str:
    """The chat template's text between a reply and the next reply: the end of the reply's turn (less
    ``reply_end``, the stop token the model generated, if any), the user message, the assistant header."""
    first = [{"role": "user", "content": "x"}, {"role": "assistant", "content": MARK}]
    whole = tokenizer.apply_chat_template([*first, {"role": "user", "content": message}], tokenize=False,
                                          add_generation_prompt=True)
    text = whole[whole.index(MARK) + len(MARK):]
    return text[len(reply_end):] if reply_end and text.startswith(reply_end) else text


def make_rollout_func(url: str, env_id: str, max_turns: int, max_new_tokens: int, temperature: float,
                      record_turns: bool) -> Callable[[list, Any], dict[str, list]]:
    """TRL's ``rollout_func``: plays one episode per prompt through the server, all of a batch in lockstep."""
    import torch

    from ecpo_train.core.rollout import sent_action
    from ecpo_train.integrations.openenv.client import ECPOEnvClient
    from ecpo_train.integrations.trl_credit import TURNS_FIELD
    from ecpo_train.policies.parsing import parse_action

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        stops = model.generation_config.eos_token_id  # the chat template's end of turn, where it differs from eos
        stops = stops if isinstance(stops, list) else [stops]
        eos_ids = {tokenizer.eos_token_id, tokenizer.pad_token_id, *(t for t in stops if t is not None)}
        n = len(prompts)
        clients = [ECPOEnvClient(base_url=url).sync() for _ in range(n)]
        try:
            for client in clients:
                client.connect()
            results = [client.reset(seed=seed_of(prompt)) for client, prompt in zip(clients, prompts, strict=True)]
            prompt_ids = [tokenizer.apply_chat_template([{"role": "user", "content": user_message(env_id, r.observation)}],
                                                        add_generation_prompt=True, tokenize=True, return_dict=False)
                          for r in results]
            prompt_ids = [list(ids["input_ids"] if isinstance(ids, dict) else ids) for ids in prompt_ids]
            completion = [[] for _ in range(n)]
            mask = [[] for _ in range(n)]
            turns: list[list[dict[str, Any]]] = [[] for _ in range(n)]
            returns = [0.0] * n
            active = list(range(n))
            for turn in range(max_turns):
                if not active:
                    break
                contexts = [prompt_ids[i] + completion[i] for i in active]
                width = max(len(c) for c in contexts)
                pad = tokenizer.pad_token_id
                input_ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts])
                attention = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
                with torch.no_grad():
                    generated = model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True,
                                               temperature=temperature, max_new_tokens=max_new_tokens, pad_token_id=pad)[:, width:].tolist()
                still = []
                for i, new in zip(active, generated, strict=True):
                    cut = next((k + 1 for k, t in enumerate(new) if t in eos_ids), len(new))
                    reply_ids = new[:cut]
                    reply = tokenizer.decode(reply_ids, skip_special_tokens=True)
                    action = parse_action(reply, env_id)
                    before = results[i].observation.state_key
                    results[i] = clients[i].step(sent_action(action))
                    reward = float(results[i].reward or 0.0)
                    returns[i] += reward
                    turns[i].append({"state_key": before, "action_key": results[i].observation.action_key,
                                     "reward": reward, "start": len(completion[i]),
                                     "end": len(completion[i]) + len(reply_ids)})
                    completion[i] += reply_ids
                    mask[i] += [1] * len(reply_ids)
                    if results[i].done or turn == max_turns - 1:  # no next turn: the row ends on its reply
                        continue
                    ended = tokenizer.decode(reply_ids[-1:]) if reply_ids and reply_ids[-1] in eos_ids else ""
                    env_text = env_turn_text(tokenizer, ended, user_message(env_id, results[i].observation))
                    env_ids = tokenizer(env_text, add_special_tokens=False)["input_ids"]
                    completion[i] += env_ids
                    mask[i] += [0] * len(env_ids)
                    still.append(i)
                active = still
        finally:
            for client in clients:
                client.close()
        output = {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": None, "env_mask": mask,
                  ANSWER_FIELD: returns}
        if record_turns:
            output[TURNS_FIELD] = turns
        return output

    return rollout_func


def env_return(prompts: list, completions: list, env_return: list[float], **_: Any) -> list[float]:
    """GRPO's reward: the episode's return, as the server reported it step by step."""
    return [float(r) for r in env_return]


def build_trainer(args: argparse.Namespace) -> Any:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from ecpo_train.integrations.trl_credit import ecpo_grpo_trainer

    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model)
    dataset = Dataset.from_dict({"prompt": [task_prompt(args.seed * 100_003 + k) for k in range(args.tasks)]})
    config = GRPOConfig(
        output_dir=args.out, max_steps=args.steps, learning_rate=args.lr, seed=args.seed,
        per_device_train_batch_size=args.batch_size, num_generations=args.num_generations,
        gradient_accumulation_steps=1, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
        bf16=False, beta=0.0, max_completion_length=args.max_turns * (args.max_new_tokens + 512),
        disable_tqdm=True, dataloader_num_workers=0,
    )
    rollout = make_rollout_func(args.url, args.env_id, args.max_turns, args.max_new_tokens, args.temperature,
                                record_turns=args.credit == "ecpo")
    trainer_class = ecpo_grpo_trainer() if args.credit == "ecpo" else GRPOTrainer
    return trainer_class(model=model, processing_class=tokenizer, reward_funcs=[env_return], args=config,
                         train_dataset=dataset, rollout_func=rollout)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Train; returns TRL's log entries (one per step: loss, reward, ...), also written to ``--log-file``."""
    args = parse_args(argv)
    trainer = build_trainer(args)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    for entry in logs:
        print(json.dumps({k: entry[k] for k in ("step", "loss", "reward", "reward_std") if k in entry}), flush=True)
    if args.log_file:
        Path(args.log_file).write_text("".join(json.dumps(entry) + "\n" for entry in logs))
    return logs


if __name__ == "__main__":
    main(sys.argv[1:])
