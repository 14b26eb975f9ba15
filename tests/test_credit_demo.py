"""The credit demo: its table shows the estimators' real numbers at the divergent anchor."""

from __future__ import annotations

import numpy as np
from rich.console import Console

from ecpo_train.apps.demo import JUNCTION, LUCKY, credit_section, credit_table, roll_batch
from ecpo_train.credit import compute_advantages


def test_demo_table_holds_the_estimators_numbers(capsys):
    cols = roll_batch()
    table, diagnostics = credit_table(cols)
    junction = [i for i, key in enumerate(cols["anchor_keys"]) if key == JUNCTION]
    assert table.row_count == len(junction) == 24
    ecpo, diag = compute_advantages("ecpo", cols)
    column = table.columns[-1]
    np.testing.assert_allclose([float(c) for c in column._cells], ecpo[junction], atol=5e-4)
    assert diagnostics["ECPO"] == diag and diagnostics["ECPO"]["divergent_anchor_fraction"] == 1.0
    assert cols["action_keys"][junction[7]] == LUCKY
    credit_section(Console(width=160))
    out = capsys.readouterr().out
    assert "GiGPO w/std" in out and "divergent_anchor_fraction" in out


def test_demo_renders_to_a_console():
    console = Console(record=True, width=120)
    table, _ = credit_table(roll_batch(groups=1))
    console.print(table)
    assert "jump the gap" in console.export_text()
