"""Training curves as PNG: ``plot_run(run_dir)`` for one run, ``plot_comparison`` for several.

Reads the run's ``metrics.jsonl`` (one JSON object per iteration, written by the trainer) through
``ecpo_train.runtime.run_dir.read_metrics``; a run's own plot is its folder's ``curves.png``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from ecpo_train.files.atomic import replaced_file
from ecpo_train.runtime.run_dir import RunFolder, read_metrics

PANELS = (
    ("success", "val/success", "success rate"),
    ("reward_mean", None, "episode reward (mean)"),
    ("episode_length", None, "episode length"),
    ("update/kl", None, "KL to reference (k3)"),
    ("credit/divergent_anchor_fraction", None, "divergent-anchor fraction"),
    ("credit/mean_rho", None, "VarGate mean rho"),
    ("invalid_action_rate", None, "invalid-action rate"),
    ("credit/num_lucky_singletons", None, "lucky singletons per batch"),
    ("credit/ecpo_strict_valid_fraction", None, "StrictValid share of anchors"),
    ("credit/step_credit_fraction", None, "rows with step credit"),
    ("credit/step_credit_below_d_min", None, "step credit below d_min (share)"),
    ("credit/corr_gigpo_std", None, "corr. to GiGPO w/std advantages"),
    ("credit/corr_grpo", None, "corr. to GRPO advantages"),
)
PANEL_COLUMNS = 4  # panels per row of the figure

EXACT_VAL_KEY = "val/exact_success"  # the exact validation success of envs with a known MDP (trainer.exact_success)


IMAGE_SUFFIXES = (".png", ".pdf", ".svg")


def _series(rows: list[dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    xs = [r["iteration"] for r in rows if key in r]
    return xs, [r[key] for r in rows if key in r]


def _plottable(value: object) -> bool:
    """A number a curve can hold: finite, or NaN (a gap)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isinf(value)


def logged_panels(data: Mapping[str, list[dict[str, float]]]) -> list[tuple[str, str | None, str]]:
    """The panels some run logged (no KL panel without a KL term, no rho panel for GRPO); success always."""
    logged = {key for rows in data.values() for row in rows for key in row}
    return [panel for panel in PANELS if panel is PANELS[0] or panel[0] in logged]


def plot_comparison(runs: Mapping[str, str | Path], out: str | Path, title: str = "") -> Path:
    """One figure, one line per run and panel (success incl. validation, reward, length, KL, credit diagnostics)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {label: read_metrics(run_dir) for label, run_dir in runs.items()}
    empty = [str(RunFolder(runs[label]).metrics) for label, rows in data.items() if not rows]
    if empty:
        raise ValueError(f"{empty[0]} has no iterations yet: nothing to plot")
    panels = logged_panels(data)
    for label, rows in data.items():  # a curve is numbers: a string, a mapping or an inf is named, not drawn
        for key in {k for panel in panels for k in (panel[0], panel[1], EXACT_VAL_KEY) if k}:
            bad = next((row for row in rows if key in row and not _plottable(row[key])), None)
            if bad is not None:
                raise ValueError(f"{RunFolder(runs[label]).metrics}: iteration {bad['iteration']:g} logs {key} = "
                                 f"{json.dumps(bad[key], default=str)[:60]}, not a finite number: nothing plotted")
    columns = min(len(panels), PANEL_COLUMNS)
    grid_rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(grid_rows, columns, figsize=(4.2 * columns, 3.4 * grid_rows), squeeze=False)
    axes = axes.reshape(-1)
    for unused in axes[len(panels):]:
        unused.axis("off")
    for ax, (key, val_key, label) in zip(axes, panels):
        for index, (name, rows) in enumerate(data.items()):
            color = f"C{index}"
            xs, ys = _series(rows, key)
            ax.plot(xs, ys, color=color, label=f"{name} (train)" if val_key else name, alpha=0.85)
            if val_key:
                vx, vy = _series(rows, val_key)
                if vx:
                    ax.plot(vx, vy, color=color, linestyle="--", marker="o", markersize=3, label=f"{name} (val)")
                ex, ey = _series(rows, EXACT_VAL_KEY)
                if ex and val_key == "val/success":
                    ax.plot(ex, ey, color=color, linestyle=":", marker="s", markersize=3, label=f"{name} (val, exact)")
        ax.set_xlabel("iteration")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with replaced_file(out) as partial:  # (a full disk mid-write leaves the previous image, and names the file)
            fig.savefig(partial, dpi=120, format=out.suffix.lower().lstrip(".") or "png")
    finally:
        plt.close(fig)
    return out


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """``run_dir/curves.png`` (or ``out``: an image path in an existing folder; no folder is created for it)."""
    run_dir = Path(run_dir)
    if out is not None:
        out = Path(out)
        if out.suffix.lower() not in IMAGE_SUFFIXES:
            raise ValueError(f"--out {out}: the image type comes from its suffix: use one of {', '.join(IMAGE_SUFFIXES)}")
        if not out.parent.is_dir():
            why = "is not a folder" if out.parent.exists() else "does not exist (it is not created: make it first)"
            raise ValueError(f"--out {out}: {out.parent} {why}")
        if out.is_dir():
            raise ValueError(f"--out {out} is a folder: give an image file path")
    return plot_comparison({run_dir.name: run_dir}, out or RunFolder(run_dir).curves, title=str(run_dir))
