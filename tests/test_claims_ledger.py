"""benchmarks/claims_ledger.py: docs/claims.md and the README's results table are what the result JSONs give (a
stale one fails here), every README row carries its scope, unit and interval in at most 200 characters, and the
verdict rule reads as documented."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks import RESULTS, claims_ledger
from benchmarks.claims_sources import all_claims


@pytest.fixture(scope="module")
def rows():
    return all_claims()


def test_the_ledger_and_the_readme_table_agree_with_the_result_jsons(capsys):
    assert claims_ledger.main(["--check"]) == 0, capsys.readouterr().out


def test_a_changed_figure_makes_the_check_fail(rows, tmp_path, monkeypatch):
    ledger, readme = tmp_path / "claims.md", tmp_path / "README.md"
    ledger.write_text(claims_ledger.LEDGER.read_text())
    readme.write_text(claims_ledger.README.read_text().replace("+0.174 [", "+0.175 [", 1))
    monkeypatch.setattr(claims_ledger, "LEDGER", ledger)
    monkeypatch.setattr(claims_ledger, "README", readme)
    assert claims_ledger.stale(rows) == ["README.md (results table)"]
    ledger.write_text(ledger.read_text().replace("| L1 |", "| L0 |"))
    assert len(claims_ledger.stale(rows)) == 2


def test_every_readme_row_has_its_scope_unit_and_interval_within_200_characters():
    text = claims_ledger.README.read_text()
    table = re.search(r"\| question \|.*?\n(?=\n)", text, flags=re.DOTALL).group(0).splitlines()[2:]
    assert len(table) >= 10
    for line in table:
        _question, answer, unit_scope, link = (c.strip() for c in line.strip("|").split(" | "))
        assert len(line) <= claims_ledger.README_LINE_LIMIT, line
        assert re.search(r"\[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", answer) or answer.startswith(("measured", "registered", "withdrawn"))
        assert ";" in unit_scope and re.search(r"CPU|H100|computed", unit_scope), line
        assert re.fullmatch(r"\[[LECKS]\d+\]\(docs/claims\.md\)", link)


def test_figures_are_the_jsons_own(rows):
    by_id = {r["id"]: r for r in rows}
    gpu = json.loads((RESULTS / "gpu_run.json").read_text())["parts"]["learning"]["validation"]
    l4 = by_id["L4"]["parts"][0]
    assert (l4["estimate"], l4["low"], l4["high"]) == (gpu["diff"], gpu["low"], gpu["high"])
    assert by_id["L4"]["scope"]["device"] == "one NVIDIA H100" and by_id["L4"]["n"] == 800
    lag = next(c for c in json.loads((RESULTS / "pipelined_learning.json").read_text())["comparisons"]
           if c["comparison"] == "ecpo_lag1 - gigpo_std_lag1")
    assert by_id["E2"]["parts"][0]["estimate"] == lag["diff"] and by_id["E2"]["n"] == 10
    for row in rows:
        assert (claims_ledger.ROOT / row["source"]).is_file(), row["source"]
        assert all(row["scope"].get(k) for k in ("env", "model", "mode", "device")), row["id"]


def test_the_ledgers_verdicts_are_the_credit_studys_own(rows):
    study = json.loads((RESULTS / "credit_study.json").read_text())["summary"]["claims"]
    same = {"holds": "shown", "contradicted": "contradicted", "not shown": "not shown", "mixed": "mixed"}
    mine = [r for r in rows if r["source"].endswith("credit_study.json") and re.match(r"C\d: ", r["claim"])]
    assert len(mine) == len(study)
    for row, theirs in zip(mine, study):
        assert row["claim"].startswith(theirs["id"])
        assert claims_ledger.verdict(row).split(" (")[0] == same.get(theirs["verdict"], theirs["verdict"])


def _row(direction, *parts):
    return {"area": "learning", "direction": direction, "scope": {"device": "CPU"},
            "parts": [{"estimate": e, "low": lo, "high": hi, "mde": m, "significant": s, "secondary": False}
                      for e, lo, hi, m, s in parts]}


def test_the_verdict_rule():
    assert claims_ledger.verdict(_row(+1, (0.3, 0.2, 0.4, 0.1, True))) == "shown"
    assert claims_ledger.verdict(_row(-1, (0.3, 0.2, 0.4, 0.1, True))) == "contradicted"
    assert claims_ledger.verdict(_row(+1, (0.02, -0.03, 0.07, 0.067, False))) == "not shown (MDE 0.067)"
    assert claims_ledger.verdict(_row(+1, (0.1, -0.3, 0.5, None, False))) == "not shown (no MDE: too few units)"
    assert claims_ledger.verdict(_row(+1, (0.3, 0.2, 0.4, 0.1, True), (0.0, -0.1, 0.1, 0.2, False))) == \
        "partly shown (1 of 2)"
    assert claims_ledger.verdict(_row(0, (-0.1, -0.2, 0.04, 0.23, False))) == "no difference shown (MDE 0.230)"
    assert claims_ledger.verdict(_row(+1) | {"parts": []}) == "registered, not run yet"


@pytest.mark.parametrize("text", ['{"cut', "", "[]", "{}"])
def test_a_result_json_that_is_not_its_benchmarks_is_one_line_exit_2_not_stale(tmp_path, monkeypatch, capsys, text):
    """Issue 58 (low): a truncated, empty, list-valued or key-less result JSON gave a traceback and exit 1, the
    code of "stale"; it is one line, exit 2 (a cut or empty one named)."""
    import shutil

    from benchmarks import claims_sources

    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    (results / "gpu_run.json").write_text(text)
    monkeypatch.setattr(claims_sources, "RESULTS", results)
    assert claims_ledger.main(["--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "restore it, or rerun its benchmark" in err
    if text in ('{"cut', ""):
        assert str(results / "gpu_run.json") in err


def test_the_statistics_reviews_corrections(rows):
    """Issue 57's corrections: identical arms are said to be so (no interval, no MDE of 0), Welch rows are not
    labelled paired, no clustered interval below 5 tasks, the pool pair has no seed-level MDE, the selection
    seed's figure stands beside L6 and E3, S9 is withdrawn with its ratio of means, the README's registered row
    shows no exploratory p, and the t-based MDEs are recomputed by exact power."""
    from benchmarks.stats import t_power

    by_id = {r["id"]: r for r in rows}
    k7 = next(p for p in by_id["K7"]["parts"] if p["label"].startswith("final success, ECPO - VarGate-only, N = 4"))
    assert k7["estimate"] is None and k7["mde"] is None and "identical" in k7["method"]
    assert "MDE 0.000" not in claims_ledger.ledger(rows)
    assert all("Welch" in by_id[k]["unit"] for k in ("K12", "K13")) and "paired" not in by_id["K12"]["unit"]
    assert "by task (4)" not in claims_ledger.figure(by_id["L1"]["parts"][0])
    assert claims_ledger.verdict(by_id["E4"]) == "not shown (no MDE: one seed pair, and the seed is the unit of a comparison of methods)"
    assert any("without seed 0" in p["label"] for p in by_id["L6"]["parts"] + by_id["E3"]["parts"])
    assert claims_ledger.verdict(by_id["S9"]) == "withdrawn" and "1.07" in by_id["S9"]["parts"][0]["method"]
    assert "29/30" in by_id["K5"]["scope"]["env"] and "mean" in by_id["S8"]["parts"][0]["method"]
    readme_k = next(line for line in claims_ledger.digest(rows) if "push lucky singletons" in line)
    assert " p 0." not in readme_k and "registered, not run yet |" in readme_k
    e2 = by_id["E2"]["parts"][0]
    lag = next(c for c in json.loads((RESULTS / "pipelined_learning.json").read_text())["comparisons"]
               if c["comparison"] == "ecpo_lag1 - gigpo_std_lag1")
    assert t_power(e2["mde"], lag["se"], lag["df"], 0.05 / lag["m"]) == pytest.approx(0.80, abs=1e-9)


def test_the_estimator_table_has_a_row_per_estimator_and_a_column_per_testbed():
    """Issue 57's table, in the ledger and the README: every registered arm a row, every testbed a column; a cell
    without results says why (registered, not run yet / whose it is)."""
    from benchmarks.claims_sources import estimator_table
    from benchmarks.estimator_comparison import load_protocol

    table, protocol = estimator_table(), load_protocol()
    assert [arm for arm, _ in table["rows"]] == protocol["arms"]
    assert table["testbeds"] == [t["name"] for t in protocol["testbeds"]]
    assert all(len(cells) == len(table["testbeds"]) for _, cells in table["rows"])
    # each run testbed with its own seed count (the corridor's 94 from its pilot, real ALFWorld's 10)
    text = claims_ledger.ledger([], table)
    assert f"{protocol['seeds']} seeds an arm on corridor" in text and "10 seeds an arm on alfworld_text" in text
    def cell(arm: str, testbed: str) -> str:
        return dict(zip(table["testbeds"], dict(table["rows"])[arm], strict=True))[testbed]

    # a cell whose unadjusted interval excludes 0 while Holm keeps it says so (real ALFWorld's GRPO and ECPO)
    assert "no difference shown (p 0.038 misses Holm's level" in cell("ecpo", "alfworld_text")
    # households, read after its 189 runs: ECPO's loss to GiGPO w/std passes Holm; HGPO's unadjusted one does not
    assert cell("ecpo", "households").startswith("-0.046 [-0.076, -0.017]: worse")
    assert "p 0.024 misses Holm's level" in cell("hgpo", "households")
    # issue 71: the Holm-adjusted p beside every unadjusted interval whose verdict is Holm's
    assert cell("ecpo", "households") == "-0.046 [-0.076, -0.017]: worse (Holm-adjusted p 0.030)"
    assert "misses Holm's level, Holm-adjusted p 0.301; MDE 0.055" in cell("ecpo", "alfworld_text")
    # the households verdicts are scoped to its one warm start and its 120 households
    assert "households (one warm start, the 120 held-out households)" in claims_ledger.estimator_lines(table)[0]
    assert "the pilot's warm start (45 of 120 won; `households_text.json`) and the study's, made by one command on two " \
           "CPUs, order ECPO and GRPO the other way round (ECPO - GRPO +0.118 in the pilot, -0.023 between" in text
    # the CPUs its seeds ran on, from the runs themselves, beside the table
    assert "households was played on Intel(R) Xeon(R) Processor (seeds 101-110); AMD EPYC (seeds 111-121); every " \
           "seed's arms on one machine." in text
    lines = claims_ledger.estimator_lines(table)
    readme = claims_ledger.README.read_text()
    assert claims_ledger.ESTIMATORS_HEAD in readme and all(line in readme for line in lines)


def test_a_holm_verdict_carries_its_adjusted_p_and_a_digest_null_its_mde(rows):
    """Issue 71: beside an unadjusted interval that excludes 0 in a Holm family, the ledger shows the Holm-adjusted p
    its verdict rests on (a credit-study part past 0 that Holm keeps null, RLlib's gain that passes it); the README's
    digest keeps the MDE of a null (E8, E9), not only the ledger's row."""
    by_id = {r["id"]: r for r in rows}
    k11 = claims_ledger.figure(next(p for p in by_id["K11"]["parts"] if p["label"].endswith("N = 10")))
    assert k11.startswith("-1.401 [-2.203, -0.599] (t-interval over seeds; Holm-adjusted p ") and \
        claims_ledger.verdict(by_id["K11"]).startswith("not shown")
    assert "(t-interval over seeds; Holm-adjusted p 0.027)" in claims_ledger.figure(by_id["E5"]["parts"][0])
    assert "Holm" not in claims_ledger.figure(by_id["E8"]["parts"][0])  # its interval holds 0
    digest = {line.rsplit("[", 1)[1][:3].rstrip("]"): line for line in claims_ledger.digest(rows)[2:]}
    assert "| not shown (MDE 0.101): +0.030 [-0.031, +0.091] |" in digest["E8"]
    assert "| not shown (MDE 0.077): +0.030 [-0.017, +0.077] |" in digest["E9"]


@pytest.mark.parametrize("table", ["## Results", claims_ledger.ESTIMATORS_HEAD])
def test_a_readme_without_one_of_its_tables_is_refused_naming_it(rows, table):
    """Both README tables are replaced where they stand; a README that lost one is refused, naming its heading (the
    estimators' table is no longer re-inserted after the results table)."""
    text = claims_ledger.README.read_text()
    block = re.search(re.escape(table) + r"\n.*?\n(\|.*?\n)(?=\n|$)", text, flags=re.DOTALL).group(1)
    table_lines, estimators = claims_ledger.digest(rows), claims_ledger.estimator_lines(claims_ledger.estimator_table())
    assert claims_ledger.readme_with(text, table_lines, estimators) == text
    with pytest.raises(ValueError, match=re.escape(f"README.md has no table under '{table}'")):
        claims_ledger.readme_with(text.replace(block, ""), table_lines, estimators)
