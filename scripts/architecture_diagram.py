"""Draw ``docs/architecture.svg``: one training iteration as the paper's Algorithm 1 runs it, and the layers of the
code that run each step (``docs/ARCHITECTURE.md`` shows it).

    python scripts/architecture_diagram.py [--out docs/architecture.svg]   # (a .png name draws a PNG)

The drawing is made here from the lists below, so a change of the design is a change of this script and a rerun.
The SVG keeps its text as text and carries no date, so a rerun without a change rewrites the same file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ROOT = Path(__file__).resolve().parents[1]
# (title, what, where) of each step of one iteration, in order; the last one feeds the first
STEPS = [
    ("draw", "each group's task", "core/tasks.py"),
    ("A. sample", "G groups x N episodes; per step:\nstate key, action, reward", "sampler: env group | RLlib runners"),
    ("step rows", "one typed row per env step", "core/batch.py"),
    ("B-D. credit", "anchors -> ECA (kappa)\n-> VarGate (tau)", "core/credit/equations.py"),
    ("E. update", "clipped token-level objective", "learner: native | RLlib learner group"),
    ("sync, log", "weights to the sampler; metrics,\nvalidation, checkpoint", "runtime/run_dir.py"),
]
# the layers, top = may import everything below it
LAYERS = [
    ("apps/", "the ecpo CLI, demo, SFT, models"),
    ("evaluation/ | integrations/", "leaderboard | RLlib, verl-agent"),
    ("runtime/", "trainer, config, run folders, FSDP"),
    ("core/", "rollout, step rows, credit, objective"),
    ("policies/", "LLM (generate | score), tabular, prompts"),
    ("ecpo_gym/", "text environments, register_env"),
]
BLUE, GREY, INK = "#dbe8f6", "#eeeeee", "#1f2d3d"


def box(ax, x, y, w, h, color, lines, sizes):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.01,rounding_size=0.02", fc=color, ec=INK, lw=1))
    step = h / (len(lines) + 1)
    for k, (text, size) in enumerate(zip(lines, sizes)):
        weight = "bold" if k == 0 else "normal"
        ax.text(x + w / 2, y + h - step * (k + 1), text, ha="center", va="center", fontsize=size, color=INK,
                fontweight=weight, family="DejaVu Sans")


def arrow(ax, start, end, **style):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color=INK, lw=1.2, **style))


def draw(out: Path) -> None:
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable, diffable
    plt.rcParams["svg.hashsalt"] = "ecpo"  # the same element ids on every run
    fig, ax = plt.subplots(figsize=(12, 5.6))
    ax.set_xlim(0, 2.14)
    ax.set_ylim(0, 1)
    ax.axis("off")
    ax.text(0.66, 0.97, "One iteration (paper's Algorithm 1): one conductor, two engines", ha="center",
            fontsize=12, fontweight="bold", color=INK)
    # the iteration: two columns of three, read down the left and up the right
    w, h = 0.5, 0.24
    spots = [(0.02, 0.66), (0.02, 0.36), (0.02, 0.06), (0.80, 0.06), (0.80, 0.36), (0.80, 0.66)]
    for (title, what, where), (x, y) in zip(STEPS, spots):
        box(ax, x, y, w, h, BLUE, [title, *what.split("\n"), where], [10.5] + [8.5] * len(what.split("\n")) + [8])
    for (x0, y0), (x1, y1) in zip(spots, spots[1:] + spots[:1]):
        if x0 == x1:  # vertical: down on the left, up on the right
            start, end = ((x0 + w / 2, y0), (x1 + w / 2, y1 + h)) if y1 < y0 else ((x0 + w / 2, y0 + h), (x1 + w / 2, y1))
        else:  # across: bottom left -> bottom right, top right -> top left
            start, end = ((x0 + w, y0 + h / 2), (x1, y1 + h / 2)) if x1 > x0 else ((x0, y0 + h / 2), (x1 + w, y1 + h / 2))
        arrow(ax, start, end)
    ax.text(0.66, 0.48, "each engine\nsupplies its sampler\nand its learner;\nthe order is\nwritten once", ha="center",
            va="center", fontsize=8.5, color=INK, style="italic")
    # the layers
    ax.text(1.78, 0.97, "Layers: imports point down", ha="center", fontsize=12, fontweight="bold", color=INK)
    lx, lw, lh, gap = 1.5, 0.56, 0.105, 0.04
    for k, (name, what) in enumerate(LAYERS):
        y = 0.84 - k * (lh + gap)
        box(ax, lx, y, lw, lh, GREY, [name, what], [9.5, 8])
        if k:
            arrow(ax, (lx + lw / 2, y + lh + gap), (lx + lw / 2, y + lh))
    fig.savefig(out, bbox_inches="tight", metadata={"Date": None} if out.suffix == ".svg" else None, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "architecture.svg")
    args = parser.parse_args(argv)
    draw(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
