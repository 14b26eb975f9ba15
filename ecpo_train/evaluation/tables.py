"""Aggregate per-episode records into the paper's tables: mean ± std over seeds.

- Table 1 (``alfworld`` + ``webshop`` manifests): ALFWorld success rate (%) per subtask (Pick, Clean, Cool,
  Look, Heat, Pick2) and over all tasks, WebShop score (mean purchase score × 100) and success rate (%).
- QA table (``searchqa`` manifests): exact match (%) per dataset (the manifest's groups) and their average.
- Any other benchmark: success rate (%) per group and over all tasks.

Each figure is computed per seed from that seed's episodes, then averaged over seeds; ``std`` is the sample
standard deviation over seeds (ddof 1; 0 for a single seed). A task type absent from a run's tasks is ``None``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import zip_longest
from typing import Any

ALFWORLD_COLUMNS = ("Pick", "Clean", "Cool", "Look", "Heat", "Pick2", "All")
WEBSHOP_COLUMNS = ("Score", "Success")
# the paper's QA table order (appendix B.1); other groups follow in the order they first appear
QA_DATASET_ORDER = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


def ordered_groups(groups: Iterable[str]) -> list[str]:
    """Distinct groups, the paper's QA datasets first in the paper's order, then the rest as first seen."""
    seen = list(dict.fromkeys(groups))
    rank = {name: i for i, name in enumerate(QA_DATASET_ORDER)}
    return sorted(seen, key=lambda g: (rank.get(g, len(rank)), seen.index(g)))


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample std (ddof 1; 0 for one value) of per-seed figures."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std, "n_seeds": n}


def _pct(values: Iterable[float]) -> float | None:
    values = list(values)
    return 100.0 * sum(values) / len(values) if values else None


def seed_figures(benchmark: str, records: Sequence[dict[str, Any]], groups: Sequence[str]) -> dict[str, float | None]:
    """The table's columns for one seed's records of one manifest."""
    if benchmark == "alfworld":
        figures = {t: _pct(float(r["success"]) for r in records if r["task_type"] == t) for t in ALFWORLD_COLUMNS[:-1]}
        figures["All"] = _pct(float(r["success"]) for r in records)
        return figures
    if benchmark == "webshop":
        return {"Score": _pct(float(r["score"]) for r in records), "Success": _pct(float(r["success"]) for r in records)}
    metric = "em" if benchmark == "searchqa" else "success"
    figures = {g: _pct(float(r[metric]) for r in records if r["group"] == g) for g in groups}
    present = [v for v in figures.values() if v is not None]
    if benchmark == "searchqa":
        figures["Avg."] = sum(present) / len(present) if present else None
    else:
        figures["All"] = _pct(float(r[metric]) for r in records)
    return figures


def aggregate(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``{agent: {manifest: {"benchmark", "columns", "per_seed", "table", "episodes"}}}`` from raw records."""
    by_run: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_run[(record["agent"], record["manifest"])].append(record)
    summary: dict[str, Any] = defaultdict(dict)
    for (agent, manifest), rows in sorted(by_run.items()):
        benchmark = rows[0]["benchmark"]
        groups = ordered_groups(r["group"] for r in rows)
        seeds = sorted({int(r["seed"]) for r in rows})
        per_seed = {s: seed_figures(benchmark, [r for r in rows if int(r["seed"]) == s], groups) for s in seeds}
        columns = list(next(iter(per_seed.values())).keys())
        table = {}
        for column in columns:
            values = [per_seed[s][column] for s in seeds if per_seed[s][column] is not None]
            table[column] = mean_std(values) if values else None
        summary[agent][manifest] = {"benchmark": benchmark, "columns": columns, "groups": groups, "seeds": seeds,
                                    "per_seed": {str(s): f for s, f in per_seed.items()}, "table": table,
                                    "episodes": len(rows)}
    return dict(summary)


def format_cell(cell: dict[str, float] | None) -> str:
    return "–" if cell is None else f"{cell['mean']:.1f} ± {cell['std']:.1f}"


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + [":-:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_tables(summary: dict[str, Any]) -> str:
    """Table 1 (one per pair of ALFWorld/WebShop manifests), the QA table(s), then any other benchmark."""
    sections: dict[tuple, list[list[str]]] = defaultdict(list)
    # a manifest's columns over every agent (an interrupted run may lack some groups): rows stay aligned
    qa_columns: dict[str, list[str]] = defaultdict(list)
    for runs in summary.values():
        for manifest, run in runs.items():
            if run["benchmark"] not in ("alfworld", "webshop"):
                qa_columns[manifest] += [c for c in run["columns"] if c not in qa_columns[manifest]]
    for columns in qa_columns.values():
        columns.sort(key=lambda c: c in ("All", "Avg."))  # stable: groups first, the overall column last
    for agent, runs in summary.items():
        alf = [m for m, r in runs.items() if r["benchmark"] == "alfworld"]
        web = [m for m, r in runs.items() if r["benchmark"] == "webshop"]
        for a, w in zip_longest(alf, web):
            cells = [format_cell(runs[a]["table"].get(c)) if a else "–" for c in ALFWORLD_COLUMNS]
            cells += [format_cell(runs[w]["table"].get(c)) if w else "–" for c in WEBSHOP_COLUMNS]
            sections[("table1", a, w)].append([agent] + cells)
        for manifest, run in runs.items():
            if run["benchmark"] in ("alfworld", "webshop"):
                continue
            sections[("other", manifest)].append([agent] + [format_cell(run["table"].get(c)) for c in qa_columns[manifest]])
    out = []
    for key, rows in sections.items():
        if key[0] == "table1":
            _, a, w = key
            title = f"ALFWorld ({a or 'not run'}) success %, WebShop ({w or 'not run'}) score and success %"
            out.append(f"### {title}\n\n" + _markdown_table(["Method", *ALFWORLD_COLUMNS, *WEBSHOP_COLUMNS], rows))
        else:
            manifest = key[1]
            out.append(f"### {manifest}\n\n" + _markdown_table(["Method", *qa_columns[manifest]], rows))
    return "\n\n".join(out) + ("\n" if out else "")
