"""The end-of-reply cut of ``TransformersPolicy.sample`` on CPU, before and after it was vectorised (issue 35).

After the decode loop, every row of the ``[rows, steps]`` sampled tokens is cut after its first end-of-sequence
token. The loop it replaced read the tensor element by element; the paper's shape (128 rows x 512 tokens, and a
random-weight model never stops early) made that seconds per environment step. Both give the same rows
(tests/test_llm_eos_cut.py); this prints their times and writes ``benchmarks/results/eos_cut.json``.

    python -m benchmarks.eos_cut [--rows 128] [--steps 512] [--reps 3]
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import torch

from benchmarks import RESULTS, ArgumentParser
from ecpo_train.policies.atomic import write_text
from ecpo_train.policies.llm import cut_at_first_eos

EOS = torch.tensor([151643, 151645])  # Qwen2.5's <|endoftext|> and <|im_end|>


def element_loop(all_tokens: torch.Tensor, all_logps: torch.Tensor, eos_ids: torch.Tensor):
    """The cut as ``sample`` did it before (one Python read per token)."""
    responses, logprobs = [], []
    eos = set(eos_ids.tolist())
    for row in range(all_tokens.shape[0]):
        length = all_tokens.shape[1]
        for t in range(all_tokens.shape[1]):
            if int(all_tokens[row, t]) in eos:
                length = t + 1
                break
        responses.append(all_tokens[row, :length].tolist())
        logprobs.append(all_logps[row, :length].tolist())
    return responses, logprobs


def best_seconds(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--steps", type=int, default=512)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "eos_cut.json")
    args = parser.parse_args(argv)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 151000, (args.rows, args.steps), generator=generator)
    logps = -torch.rand(args.rows, args.steps, generator=generator)
    stopped = tokens.clone()  # a trained model: each reply ends somewhere in the first half
    ends = torch.randint(1, args.steps // 2, (args.rows,), generator=generator)
    stopped[torch.arange(args.rows), ends] = int(EOS[1])
    cases = []
    for name, table in (("no reply stops (random weights)", tokens), ("every reply stops in its first half", stopped)):
        assert cut_at_first_eos(table, logps, EOS) == element_loop(table, logps, EOS)
        before = best_seconds(lambda table=table: element_loop(table, logps, EOS), args.reps)
        after = best_seconds(lambda table=table: cut_at_first_eos(table, logps, EOS), args.reps)
        cases.append({"case": name, "before_seconds": before, "after_seconds": after})
        print(f"{name:38s} before {before:7.3f} s   after {after:7.3f} s   ({before / after:5.1f}x)")
    report = {"rows": args.rows, "steps": args.steps, "reps": args.reps, "torch": torch.__version__,
              "cpu": platform.processor() or platform.machine(), "cases": cases,
              "note": "best of reps on a shared 2-core machine under load; same rows both ways (asserted)"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
