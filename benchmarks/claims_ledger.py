"""The ledger of every claim the project makes about learning, credit and speed: ``docs/claims.md``, and the README's
results table as its digest, both written from the result JSONs (``benchmarks/claims_sources.py`` reads them).
The verdict rule: :func:`verdict` (stated in the ledger's head); ``--check`` (the suite runs it): docs/benchmarks.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import ROOT, ArgumentParser, refused
from benchmarks.claims_sources import all_claims, estimator_table
from benchmarks.stats import holm_p_text

LEDGER = ROOT / "docs" / "claims.md"
README = ROOT / "README.md"
TABLE_HEAD = ("| question | answer: estimate [95 % interval] | unit, n; scope | ledger |", "| --- | --- | --- | --- |")
README_LINE_LIMIT = 200
MIN_CLUSTERS = 5  # a clustered interval over fewer tasks rests on too few cluster totals to show


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def figure(p: Mapping[str, Any]) -> str:
    """An estimate as the ledger prints it (its head says what stands beside it): ``+0.348 [+0.288, +0.410] ...``."""
    if p["estimate"] is None:
        return p["method"]
    text = f"{_num(p['estimate'])} [{_num(p['low'])}, {_num(p['high'])}]"
    if beside := "; ".join(b for b in (p["method"], holm_p_text(p)) if b):
        text += f" ({beside})"
    if p.get("by_task") and (p["by_task"]["clusters"] or 0) >= MIN_CLUSTERS:
        c = p["by_task"]
        text += f"; by {c['unit'] or 'task'} ({c['clusters']}) [{_num(c['low'])}, {_num(c['high'])}]"
    return text


def verdict(row: Mapping[str, Any]) -> str:
    """The claim's verdict from its primary parts (secondary ones are shown, not counted)."""
    primary = [p for p in row["parts"] if not p.get("secondary")]
    if row.get("status"):
        return row["status"]
    if row["area"] == "speed":
        return f"measured ({row['scope']['device']})"
    if not primary:
        return "registered, not run yet"
    signs = [p["estimate"] > 0 if row["direction"] >= 0 else p["estimate"] < 0 for p in primary if p["significant"]]
    mdes = [p["mde"] for p in primary if p["mde"] is not None]
    no_mde = row.get("no_mde", "no MDE: too few units")
    unshown = f"not shown ({'MDE ' + '-'.join(f'{m:.3f}' for m in sorted({min(mdes), max(mdes)})) if mdes else no_mde})"
    if row["direction"] == 0:
        return "a difference shown" if signs else unshown.replace("not shown", "no difference shown")
    if signs and all(signs) and len(signs) == len(primary):
        return "shown"
    if signs and not any(signs):
        return "contradicted"
    if signs:
        return f"partly shown ({sum(signs)} of {len(primary)})" if all(signs) else "mixed"
    return unshown


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell (a bare | would end the cell)."""
    return text.replace("|", "\\|")


def scope_text(scope: Mapping[str, str]) -> str:
    return "; ".join(v for v in (scope["env"], scope["model"], scope["mode"], scope["device"]) if v and v != "-")


ESTIMATORS_HEAD = "### Step-credit estimators under one protocol"


def estimator_lines(table: Mapping[str, Any]) -> list[str]:
    """Issue 57's table (:func:`benchmarks.claims_sources.estimator_table`) as markdown lines."""
    out = ["| estimator | " + " | ".join(table["headers"]) + " |",
           "| --- |" + " --- |" * len(table["testbeds"])]
    out += [f"| {arm} | " + " | ".join(_cell(c) for c in cells) + " |" for arm, cells in table["rows"]]
    return out


def ledger(rows: Sequence[Mapping[str, Any]], table: Mapping[str, Any] | None = None) -> str:
    lines = ["# Claims ledger", "",
             ("Every claim the project makes about learning, credit and speed, written from the result JSONs by "
              "`python -m benchmarks.claims_ledger` (do not edit by hand; `--check` fails when this file is stale). "
              "Verdicts: *shown* where the claim's test is significant on its side, *contradicted* on the other, "
              "*not shown* with the MDE (the smallest effect the run could have detected with 80 % power, by the exact "
              "power of its test at its Holm level) otherwise; a measurement is *measured* on the device named, or "
              "*withdrawn* where its own data do not support it. Intervals are unadjusted 95 % ones; where one excludes 0 "
              "in a Holm family, the verdict is Holm's and the Holm-adjusted p it rests on stands beside it. "
              "A clustered interval is shown from 5 tasks on. A learning claim from one training "
              "run covers its validation draws, not run-to-run variance; a comparison of methods takes the seed "
              "as its unit. Secondary lines are shown in italics and do not enter the verdict."), ""]
    for area, title in (("learning", "Learning"), ("comparison", "Method comparisons"), ("credit", "Credit"),
                        ("speed", "Speed and memory")):
        lines += [f"## {title}", "", "| id | claim | scope | unit, n | estimate [95 % interval] | verdict | source |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in (r for r in rows if r["area"] == area):
            shown = "<br>".join((f"*{p['label']}: {figure(p)}*" if p.get("secondary") else
                                 f"{p['label']}: {figure(p)}" if p["label"] else figure(p)) for p in row["parts"])
            lines.append(f"| {row['id']} | {_cell(row['claim'])} | {scope_text(row['scope'])} | {row['unit']}, n = "
                         f"{row['n']} | {shown} | {verdict(row)} | [{Path(row['source']).name}](../{row['source']}) |")
        lines.append("")
    if table is not None:
        seeds = ", ".join(f"{count} seeds an arm on {name}" for name, count in table["seeds"].items())
        lines += ["## Step-credit estimators under one protocol (issue 57)", "",
                  ("Registered in `benchmarks/estimator_comparison.yaml` before its runs (" + seeds + ", N = 8; the "
                   "endpoint: the final policy's exact success on the corridor, its share of the 140 valid_seen games "
                   "won on alfworld_text, of the 120 held-out generated households on households); each cell is the arm minus GiGPO w/std, paired by seed, with Holm over the "
                   "testbed's comparisons, the Holm-adjusted p beside an interval that excludes 0 and the exact-power "
                   f"MDE beside a null. {table.get('warm_starts', '')} Source: [{table['source']}]"
                   f"(../benchmarks/results/{table['source']}). {table['machines']}").replace("  ", " ").rstrip(),
                  "", *estimator_lines(table), ""]
    return "\n".join(lines)


UNIT_SHORT = (("paired validation episodes; one run", "1 run, {n} episodes"),
              ("paired validation episodes; one pair of runs", "1 seed pair, {n} episodes"),
              ("training seeds", "{n} seeds"), ("training runs paired by", "{n} of {planned} pairs"),
              ("training runs", "{planned} runs planned"),
              ("games (one episode each)", "{n} games"))


def unit_short(row: Mapping[str, Any]) -> str:
    template = next((t for prefix, t in UNIT_SHORT if row["unit"].startswith(prefix)), "{unit}")
    planned = re.search(r"(\d+) planned", row["unit"])
    return template.format(n=row["n"], unit=row["unit"], planned=planned.group(1) if planned else "?")


def digest(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The README's results table: one short row per claim with a ``digest`` (question, scope)."""
    out = list(TABLE_HEAD)
    for row in (r for r in rows if r["digest"]):
        question, scope = row["digest"]
        primary = [p for p in row["parts"] if not p.get("secondary")]
        if not primary:  # registered, not run: an exploratory line stays in the ledger, out of the digest
            out.append(f"| {_cell(question)} | {verdict(row)} | {unit_short(row)}; {scope} | [{row['id']}](docs/claims.md) |")
            continue
        p = primary[0]
        short = re.sub(r"; by (\w+) \(\d+\)", r", by \1", figure(p | {"method": ""})) if p["estimate"] is not None else \
            p.get("digest", p["method"]) + (f" ({p['label']})" if p["label"] else "")
        label = f"{p.get('short') or p['label']} (1 of {len(primary)} in the ledger): " if len(primary) > 1 else ""
        short = short.replace("Holm-adjusted p", "Holm p")
        said = verdict(row) if " (MDE " in verdict(row) else verdict(row).split(" (")[0]  # (the ledger keeps the notes)
        out.append(f"| {_cell(question)} | {said}: {label}{_cell(short)} | {unit_short(row)}; {scope} | "
                   f"[{row['id']}](docs/claims.md) |")
    return out


def readme_with(text: str, table: list[str], estimators: list[str]) -> str:
    """``text`` (the README) with the table under ``## Results`` replaced by ``table``, and the one under
    ``ESTIMATORS_HEAD`` by ``estimators``."""
    for pattern, lines, where in ((r"## Results\n.*?\n(\| question \|.*?\n)(?=\n)", table, "## Results"),
                                  (re.escape(ESTIMATORS_HEAD) + r"\n\n(\|.*?\n)(?=\n|$)", estimators, ESTIMATORS_HEAD)):
        if (match := re.search(pattern, text, flags=re.DOTALL)) is None:
            raise ValueError(f"README.md has no table under '{where}'")
        text = text[:match.start(1)] + "\n".join(lines) + "\n" + text[match.end(1):]
    return text


def generated(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Path, str]]:
    """Each generated file (named as ``--check`` names it): its path and the text the JSONs give it."""
    table = estimator_table()
    return {"docs/claims.md": (LEDGER, ledger(rows, table)),
            "README.md (results table)": (README, readme_with(README.read_text(), digest(rows), estimator_lines(table)))}


def stale(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Which of the generated files differ from what the JSONs give."""
    return [name for name, (path, text) in generated(rows).items() if not path.is_file() or path.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/claims.md or the README table is stale")
    args = parser.parse_args(argv)
    try:
        rows = all_claims()
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:  # a result JSON not as written
        why = " ".join(str(error).split())[:200]
        return refused(f"a result JSON the ledger reads is not as its benchmark wrote it ({type(error).__name__}: "
                       f"{why}); restore it, or rerun its benchmark")  # exit 2 (not 1: that is "stale")
    if args.check:
        behind = stale(rows)
        if behind:
            print(f"stale: {', '.join(behind)}; run python -m benchmarks.claims_ledger")
            return 1
        print(f"docs/claims.md and the README's results table agree with the JSONs ({len(rows)} claims)")
        return 0
    for path, text in generated(rows).values():
        path.write_text(text)
    print(f"wrote docs/claims.md and the README's results table ({len(rows)} claims)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
