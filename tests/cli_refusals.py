"""The CLI's one-line refusal, as the refusal tests read it: exit 2 and a single ``error: ...`` line, no traceback."""

from __future__ import annotations

from typer.testing import CliRunner

from ecpo_train.apps.cli import app

runner = CliRunner()
FAST = ["iterations=1", "n_groups=2", "group_size=2", "val_every=0", "progress=false", "tensorboard=false"]


def refused(argv: list[str]) -> str:
    """The CLI's one error line for ``argv`` (exit 2, no traceback)."""
    result = runner.invoke(app, argv)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]
