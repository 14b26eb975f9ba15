"""The ``ecpo`` command line: ``ecpo demo | train | plot | models | leaderboard | bench``.

Each command is a thin shell over a module that does the work; heavy imports happen inside the command
so ``ecpo --help`` stays fast.
"""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evidence-Calibrated Policy Optimization.")


@app.command()
def demo() -> None:
    """The README's quick-start on an embedded environment (no downloads)."""
    from ecpo_train.demo import main

    main()


if __name__ == "__main__":
    app()
