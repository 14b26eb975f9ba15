"""The progress line where the output is not a terminal (a log file, a pipe): plain lines at a steady interval,
from ``ecpo train`` as from ``ecpo sft`` (one rule, ``runtime/progress.py``), and a "val" figure that says what it
measures."""

from __future__ import annotations

import re
import time

from conftest import train

from ecpo_train.runtime.progress import LINES_EVERY, Progress


def test_ecpo_train_into_a_log_prints_plain_lines_naming_what_val_measures(tmp_path):
    """``ecpo train`` with its output captured (not a terminal): a plain line when the run starts, after its first
    iteration and at its end, each with the count; the "val" figure names its set (the env's first 2 tasks)."""
    result = train(tmp_path / "run", "iterations=3", "val_every=2", "val_num_tasks=2", "progress=true")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("ecpo: ")]
    assert re.match(r"ecpo: 0/3 \(\d+s\) \| iteration 1: ", lines[0]), lines
    assert any(re.match(r"ecpo: 1/3 \(\d+s\) \| success \d\.\d\d \| val \d\.\d\d \(the env's first 2 tasks\) \| kl ",
                        line) for line in lines), lines
    assert re.match(r"ecpo: 3/3 \(\d+s\) \| success \d\.\d\d \| val \d\.\d\d \(the env's first 2 tasks\) \| ", lines[-1])


def test_plain_lines_come_at_most_every_interval_and_at_the_end(capsys):
    """Within one interval only the first line is printed; once it has passed, the next phase or count prints the
    latest count, status and phase; a stage's first and last units always print, the ones between only after an
    interval (``ecpo sft`` and ``ecpo train`` both use the class's default, ``LINES_EVERY``)."""
    assert LINES_EVERY == 30.0  # the interval the docs give
    with Progress(True, 3, 0, "ecpo", lines_every=2.0) as progress:
        progress.phase("rollout step 1")
        for step in range(2, 50):
            progress.phase(f"rollout step {step}")
        time.sleep(2.1)
        progress.phase("update")
        for success in ("0.25", "0.50", "0.75"):
            progress.advance(f"success {success}")
    lines = capsys.readouterr().out.splitlines()
    assert [re.sub(r"\(\d+s\)", "(Ns)", line) for line in lines] == [
        "ecpo: 0/3 (Ns) | rollout step 1", "ecpo: 0/3 (Ns) | update", "ecpo: 1/3 (Ns) | success 0.25",
        "ecpo: 3/3 (Ns) | success 0.75"]
    assert lines[1].startswith("ecpo: 0/3 (2s)")


def test_val_names_a_listed_set_as_listed():
    """A preset that lists its validation tasks (``households_text``: 32 households of their own seed range) shows
    "32 listed tasks", not "the env's first 32"."""
    from ecpo_train.core.tasks import validation_label
    from ecpo_train.runtime.config import load_config

    config = load_config("households_text")
    assert validation_label(config, config.val_tasks) == "32 listed tasks"
    assert validation_label(load_config("quickstart"), ["a"] * 4) == "the env's first 4 tasks"
