"""Credit study, the figures: small PNGs of success curves, divergent-anchor fraction and per-N diagnostics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.credit_study_report import METHOD_LABELS
from benchmarks.stats import t975


def plot_study(runs: Sequence[dict[str, Any]], summary: dict[str, Any], prefix: Path) -> list[str]:
    """Small PNGs: success curves with bands, divergent-anchor fraction over training, per-N diagnostics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(fig, env: str, tag: str) -> None:
        fig.tight_layout()
        path = prefix.parent / f"{prefix.name}_{env}_{tag}.png"
        fig.savefig(path, dpi=70)
        plt.close(fig)
        written.append(str(path))

    sizes, methods = summary["group_sizes"], summary["methods"]
    colors = dict(zip(METHOD_LABELS, ("#777777", "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd")))
    for env in summary["envs"]:
        for curve, ylabel, tag in (("eval_success", "eval success", "curves"),
                                   ("divergent_fraction", "divergent-anchor fraction", "divergent")):
            fig, axes = plt.subplots(1, len(sizes), figsize=(3.2 * len(sizes), 2.6), sharey=True, squeeze=False)
            for ax, n in zip(axes[0], sizes):
                for method in methods:
                    ys = [r["curves"][curve] for r in runs
                          if r["env_name"] == env and r["method"] == method and r["group_size"] == n]
                    if not ys:
                        continue
                    y = np.asarray(ys, dtype=float)
                    mean = np.nanmean(y, axis=0)
                    half = t975(len(y) - 1) * np.nanstd(y, axis=0, ddof=1) / math.sqrt(len(y)) if len(y) > 1 else 0
                    x = np.arange(1, y.shape[1] + 1)
                    ax.plot(x, mean, color=colors.get(method), lw=1.2, label=METHOD_LABELS.get(method, method))
                    ax.fill_between(x, mean - half, mean + half, color=colors.get(method), alpha=0.15, lw=0)
                ax.set_title(f"{env}, N={n}", fontsize=8)
                ax.set_xlabel("iteration", fontsize=7)
                ax.tick_params(labelsize=6)
            axes[0][0].set_ylabel(ylabel, fontsize=7)
            axes[0][-1].legend(fontsize=5, loc="best")
            save(fig, env, tag)
        fig, axes = plt.subplots(1, 3, figsize=(9.6, 2.6), squeeze=False)
        for ax, (metric, title) in zip(axes[0], (("mean_rho", "mean rho"), ("adv_range", "advantage range"),
                                                  ("late_reward_std", "late reward std"))):
            width = 0.8 / max(1, len(methods))
            for k, method in enumerate(methods):
                cells = [summary["cells"].get(f"{env}|{method}|{n}", {}).get(metric) for n in sizes]
                mean = [np.nan if c is None else c["mean"] for c in cells]
                err = [np.nan if c is None else c["ci"] for c in cells]
                if all(math.isnan(v) for v in mean):
                    continue
                ax.bar(np.arange(len(sizes)) + k * width, mean, width, yerr=err, color=colors.get(method),
                       label=METHOD_LABELS.get(method, method), error_kw={"lw": 0.6})
            ax.set_xticks(np.arange(len(sizes)) + 0.4 - width / 2, [f"N={n}" for n in sizes], fontsize=7)
            ax.set_title(f"{env}: {title}", fontsize=8)
            ax.tick_params(labelsize=6)
        axes[0][0].legend(fontsize=5)
        save(fig, env, "per_n")
    return written
