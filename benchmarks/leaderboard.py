"""Leaderboard evaluation: the ``ecpo leaderboard`` command itself (same options, see ``--help``), with results
going to ``benchmarks/results/leaderboard`` unless ``--out-dir`` says otherwise (jsonl per manifest,
results.json, leaderboard.json/.md); rerunning resumes.

    python -m benchmarks.leaderboard --agent expert --manifest alfworld_gen --manifest webshop_gen --seeds 1
    python -m benchmarks.leaderboard --agent react --model /path/to/model --manifest searchqa_gen --greedy
"""

from __future__ import annotations

import sys

import typer

from benchmarks import RESULTS
from ecpo_train.evaluation.command import leaderboard_command
from ecpo_train.evaluation.options import typer_command

DEFAULT_OUT = RESULTS / "leaderboard"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    # a later --out-dir in argv wins over this default
    app = typer.Typer(add_completion=False)
    app.command()(typer_command(leaderboard_command))
    app(["--out-dir", str(DEFAULT_OUT), *argv], prog_name="python -m benchmarks.leaderboard")


if __name__ == "__main__":
    main()
