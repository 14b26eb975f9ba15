"""The ``ecpo`` command line: ``ecpo demo | train | sft | plot | models | leaderboard | bench | serve``.

Each command is a thin shell over a module that does the work; heavy imports happen inside the command
so ``ecpo --help`` stays fast.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ecpo_gym.kwargs import shown
from ecpo_train.evaluation.command import leaderboard_command
from ecpo_train.evaluation.options import LeaderboardOptions, cut_long_words, error_line, typer_command
from ecpo_train.runtime.engines import DEFAULT_ENGINE, ENGINES, engine_spec
from ecpo_train.runtime.models import DEMO_MODEL

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evidence-Calibrated Policy Optimization.")


def fail(err: BaseException | str) -> typer.Exit:
    """Every verb's rule for bad input: one line ``error: ...`` on stderr, exit status 2 (raise the result)."""
    typer.echo(f"error: {cut_long_words(err) if isinstance(err, str) else error_line(err)}", err=True)
    return typer.Exit(2)


def _input_errors() -> tuple[type[BaseException], ...]:
    """What bad input raises: a wrong value or type, a missing or unwritable path, an unknown env id."""
    import gymnasium as gym

    return ValueError, TypeError, KeyError, OSError, gym.error.Error


DEMO_OWN_KEYS = ("run_dir", "model")  # what `ecpo demo` sets itself: an override of them is refused


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def demo(
    ctx: typer.Context,
    tabular: bool = typer.Option(False, help="train the tabular policy (ECPO next to GiGPO w/std, seconds) instead of "
                                             "the small LM"),
) -> None:
    """The README's quick-start: a real small LM (SmolLM2-135M, from PyPI) learns with ECPO on an embedded env.

    Extra key=value arguments override the training preset (corridor_llm), e.g. iterations=6.
    """
    from ecpo_train.apps.demo import main

    overrides = list(ctx.args)
    try:
        if overrides and tabular:
            raise ValueError(f"ecpo demo --tabular takes no overrides (got {' '.join(overrides)}): it runs the "
                             "quickstart preset as is; use `ecpo train --config quickstart KEY=VALUE` instead")
        own = [item for item in overrides if item.split("=", 1)[0].strip() in DEMO_OWN_KEYS]
        if own:  # the demo replaces its own run folder with SmolLM2's run: never another folder, never another model
            raise ValueError(f"{cut_long_words(own[0])}: ecpo demo trains {DEMO_MODEL} in runs/demo-llm (replacing "
                             "its earlier run there); for another model or folder use `ecpo train --config "
                             "corridor_llm model=... run_dir=...`")
        if overrides:  # checked before the credit tables and the model pull, not after them
            from ecpo_train.runtime.config import load_config

            load_config("corridor_llm", [f"model={DEMO_MODEL}", *overrides]).resolved_device()
        main(tabular=tabular, overrides=overrides)
    except _input_errors() as err:
        raise fail(err) from None


def _with_engine_options(command: Any) -> Any:
    """``command`` with every declared engine's own options (``EngineSpec.options``) as typer options in place of
    its ``**engine_options`` (typer reads a command's options from its signature)."""
    import inspect

    params = [p for p in inspect.signature(command, eval_str=True).parameters.values()
              if p.kind is not inspect.Parameter.VAR_KEYWORD]
    for spec in ENGINES.values():
        params += [inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, annotation=type(option.default),
                                     default=typer.Option(option.default, help=f"--engine {spec.name}: {option.help}"))
                   for option in spec.options]
    command.__signature__ = inspect.Signature(params, return_annotation=None)
    return command


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@_with_engine_options
def train(
    ctx: typer.Context,
    config: str = typer.Option(..., help="YAML preset path or name (a file of ecpo_train/runtime/configs/, e.g. "
                                         "quickstart, corridor_llm, alfworld_text, alfworld)"),
    resume: bool = typer.Option(False, help="continue the run in run_dir from its checkpoint (keys that define "
                                            "the run must not change; iterations and logging may); refused where "
                                            "run_dir holds no run"),
    resume_or_start: bool = typer.Option(False, "--resume-or-start",
                                         help="--resume if run_dir holds a run, else start one there (job scripts)"),
    overwrite: bool = typer.Option(False, help="replace the run already in run_dir (its config, metrics, "
                                               "checkpoint, curves, eval/); without --resume or --overwrite a "
                                               "folder that holds a run is refused"),
    nproc: int = typer.Option(0, help="K >= 2: FSDP2 over K processes (runs `python -m torch.distributed.run "
                                      "--nproc-per-node K -m ecpo_train.apps.cli train ... fsdp=true`)"),
    engine: str = typer.Option(DEFAULT_ENGINE, help="; ".join(f"{spec.name}: {spec.summary}"
                                                              for spec in ENGINES.values())),
    **engine_options: Any,  # every declared engine's own options (_with_engine_options)
) -> None:
    """Train a run; extra arguments are key=value config overrides (e.g. model=DIR lr=2e-6).

    Nothing is written to run_dir until every check (config, env, model, resume compatibility) has passed."""
    from pathlib import Path

    from ecpo_train.runtime.config import config_dict, load_config
    from ecpo_train.runtime.resume import RESUME_OR_START, plan_start

    try:
        spec = engine_spec(engine)
    except ValueError as err:
        raise fail(err) from None
    if resume and resume_or_start:
        raise fail(ValueError("--resume and --resume-or-start: give one"))
    resume = RESUME_OR_START if resume_or_start else resume
    for other in ENGINES.values():  # an option only another engine reads: refused, never silently ignored
        given = [option.flag for option in other.options if other is not spec and option.name in engine_options
                 and getattr(ctx.get_parameter_source(option.name), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")]
        if given:
            raise fail(ValueError(f"{', '.join(given)}: only --engine {other.name} {other.options_are}; --engine "
                                  f"{engine} would ignore it (give --engine {other.name}, or leave it out)"))
    try:
        # (an engine declared after this module was imported has no options here: its defaults)
        settings = spec.engine_settings({option.name: engine_options.get(option.name, option.default)
                                         for option in spec.options}, nproc)
    except ValueError as err:
        raise fail(err) from None
    if nproc:
        if nproc < 2:
            typer.echo(f"error: --nproc {nproc}: FSDP needs at least 2 processes (leave --nproc out for one)", err=True)
            raise typer.Exit(2)
        import subprocess
        import sys

        try:  # the config and the run folder are checked here, once, before K processes start
            from ecpo_train.runtime.config_values import read_yaml
            from ecpo_train.runtime.distributed import check_fsdp_launch

            def says_true(raw: str) -> bool:
                try:
                    return read_yaml(raw) is True
                except Exception:  # noqa: BLE001  (not YAML: not true)
                    return False

            against = [arg for arg in ctx.args if arg.startswith("fsdp=") and not says_true(arg[5:])]
            if against:  # --nproc K sets fsdp=true: another value would be dropped silently
                raise ValueError(f"{shown(against[0])}: --nproc {nproc} runs FSDP (fsdp=true); leave it out, or "
                                 "leave --nproc out for one process")
            cfg = load_config(config, [arg for arg in ctx.args if not arg.startswith("fsdp=")])
            check_fsdp_launch(cfg, nproc)  # (a tabular preset, K > the GPUs: refused here, not in K tracebacks)
            plan_start(Path(cfg.run_dir), config_dict(cfg) | {"fsdp": True}, resume=resume, overwrite=overwrite,
                       engine=engine)
        except _input_errors() as err:
            raise fail(err) from None
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                   "-m", "ecpo_train.apps.cli", "train", "--config", config,
                   *({True: ["--resume"], RESUME_OR_START: ["--resume-or-start"]}.get(resume, [])),
                   *(["--overwrite"] if overwrite else []), *(["--engine", engine] if engine != DEFAULT_ENGINE else []),
                   *[arg for arg in ctx.args if not arg.startswith("fsdp=")], "fsdp=true"]
        raise typer.Exit(subprocess.call(command))
    from ecpo_train.runtime.run import open_run

    try:  # the folder, then the environment and the policy: every error surfaces before the first write
        cfg = load_config(config, list(ctx.args))
        cfg.resolved_device()
        run = open_run(spec.engine_class(), cfg, resume=resume, overwrite=overwrite, **settings)
    except _input_errors() as err:
        raise fail(err) from None
    _train_run(run)
    if run.engine.writes:
        typer.echo(f"run folder: {cfg.run_dir} ({spec.files})")


def _train_run(run) -> None:
    """Train a started run to its end and close it; a write that fails (a full disk) is one line, exit 2 (what
    was written stays: the last checkpoint resumes)."""
    try:
        with run:
            run.train()
    except (ValueError, OSError) as err:
        raise fail(err) from None


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def sft(
    ctx: typer.Context,
    config: str = typer.Option(..., help="YAML preset path or name of the RL run to warm-start (its env, model, "
                                         "prompt_style and history_length are used)"),
    out: str = typer.Option(..., help="folder to write the fine-tuned model and tokenizer to (then `ecpo train "
                                      "... model=OUT`): new, empty, or an earlier sft output (replaced)"),
    episodes: int = typer.Option(64, help="expert episodes to imitate"),
    epochs: int = typer.Option(3, help="passes over the expert steps"),
    lr: float = typer.Option(1e-5, help="AdamW learning rate"),
    batch_size: int = typer.Option(8, help="expert steps per optimizer step"),
    checkpointing: bool = typer.Option(True, "--checkpointing/--no-checkpointing",
                                       help="recompute decoder layers in backward (less memory, ~1/3 more compute)"),
) -> None:
    """Expert warm start: fine-tune the run's model on the expert's replies (policy_mode=score: its choices).

    Extra key=value arguments override the preset (e.g. model=DIR env_kwargs.num_tasks=8); a forward holds at
    most max_tokens_per_micro_batch tokens (4096 where the preset sets none).
    """
    from ecpo_train.runtime.config import load_config
    from ecpo_train.runtime.sft import check_sft_out, check_sft_settings, run_sft

    try:
        check_sft_settings(episodes, epochs, lr, batch_size)
        cfg = load_config(config, list(ctx.args))
        cfg.resolved_device()
        check_sft_out(out, cfg.model)  # before the expert plays a step
        summary = run_sft(cfg, episodes=episodes, epochs=epochs, lr=lr, out=out, batch_size=batch_size,
                          checkpointing=checkpointing)
    except _input_errors() as err:
        raise fail(err) from None
    typer.echo(f"{summary['steps']} expert steps from {episodes} episodes; {summary['objective']}: "
               f"{summary['loss_before']:.3f} -> {summary['loss_after']:.3f} over {epochs} epoch(s)")
    typer.echo(f"model folder: {out} (use model={out}; sft.json holds the summary)")


@app.command()
def plot(run_dir: str = typer.Argument(..., help="a run folder written by `ecpo train`"),
         out: str = typer.Option(None, help="image path (.png, .pdf or .svg) in an existing folder; default "
                                            "RUN_DIR/curves.png")) -> None:
    """Training curves of a run as a PNG."""
    from ecpo_train.runtime.plotting import plot_run

    try:
        typer.echo(plot_run(run_dir, out))
    except (ValueError, OSError) as err:
        raise fail(err) from None


models_app = typer.Typer(no_args_is_help=True, help="Get models without the Hugging Face Hub.")
app.add_typer(models_app, name="models")


@models_app.command("pull")
def models_pull(
    name: str = typer.Argument(..., help=f"registry name, e.g. {DEMO_MODEL}"),
    cache_dir: str = typer.Option(None, help="default: $ECPO_CACHE_DIR/models or ~/.cache/ecpo/models"),
) -> None:
    """Download a model's PyPI package, check its sha256, convert its GGUF to a transformers folder."""
    from ecpo_train.runtime.models import MODEL_REGISTRY, pull_model

    if name not in MODEL_REGISTRY:
        raise fail(f"unknown model {name!r}; pullable models: {', '.join(sorted(MODEL_REGISTRY))}")
    try:
        typer.echo(pull_model(name, cache_dir))
    except (ValueError, OSError, RuntimeError, ImportError) as err:  # (RuntimeError: pip or the conversion failed)
        raise fail(err) from None


@models_app.command("tiny")
def models_tiny(
    out_dir: str = typer.Argument(..., help="folder to write"),
    tokenizer: str = typer.Option(None, help="tokenizer folder; default $ECPO_TOKENIZER_DIR, else trained"),
    seed: int = typer.Option(0, help="weight initialisation seed"),
) -> None:
    """Write a randomly initialised tiny Qwen2 (2 layers, hidden 64) with a tokenizer, for CPU tests."""
    from ecpo_train.runtime.models import write_tiny_model

    try:
        typer.echo(write_tiny_model(out_dir, tokenizer_path=tokenizer, seed=seed))
    except (ValueError, OSError) as err:
        raise fail(err) from None


app.command(name="leaderboard")(typer_command(leaderboard_command))


def evaluate_run(
    options: LeaderboardOptions,
    run_dir: Annotated[str, typer.Argument(help="a run folder written by `ecpo train` (or its checkpoint.pt)")],
) -> None:
    """Evaluate a trained checkpoint: `ecpo leaderboard --agent checkpoint` on the run's own environment, or on
    manifests, or on every task of the run's environment with other arguments (`--env-kwarg split=valid_seen`)."""
    import dataclasses
    from pathlib import Path

    from ecpo_gym.families import recorded_env_id
    from ecpo_train.evaluation.command import run_leaderboard
    from ecpo_train.runtime.run_dir import RunFolder, read_saved_config

    try:
        if not Path(run_dir).exists():
            raise FileNotFoundError(f"{run_dir} not found: pass a run folder written by `ecpo train`")
        run_folder = RunFolder(run_dir if Path(run_dir).is_dir() else Path(run_dir).parent)
        config = read_saved_config(run_folder.config)
        if config is None:
            raise FileNotFoundError(f"{run_folder.config} not found: pass a run folder written by `ecpo train`")
        recorded_env_id(config.get("env_id"), str(run_folder.config))  # a planted "evilmod:Evil-v0" imports nothing
        if not isinstance(config.get("env_kwargs") or {}, dict):
            raise ValueError(f"{run_folder.config}: env_kwargs must be a mapping")  # noqa: TRY004
        # the run's env and its arguments, each --env-kwarg over them; --env or --manifest: as `ecpo leaderboard`
        own = options.env is None and not options.manifest
        given = {pair.partition("=")[0].strip() for pair in options.env_kwarg or []}  # (these replace the run's)
        env_kwargs = [f"{key}={json.dumps(value)}" for key, value in (config.get("env_kwargs") or {}).items()
                      if key not in given]
        if not options.out_dir:  # the run's own eval/: never a link out of the run folder
            from ecpo_train.files.atomic import refuse_links

            refuse_links(run_folder.eval)
        options = dataclasses.replace(options, agent="checkpoint", checkpoint=run_dir,
                                      env=config["env_id"] if own else options.env,
                                      env_kwarg=[*env_kwargs, *(options.env_kwarg or [])] if own else options.env_kwarg,
                                      out_dir=options.out_dir or str(run_folder.eval))
        result = run_leaderboard(options)
    except _input_errors() as err:
        raise fail(err) from None
    typer.echo(result["markdown"])


app.command(name="eval")(typer_command(
    evaluate_run, only=("manifest", "env", "env_kwarg", "seeds", "greedy", "limit", "out_dir", "device", "progress"),
    defaults={"seeds": 1, "out_dir": None},
    helps={"manifest": "manifest name or JSON path (repeatable); default: every task of the run's environment",
           "env": "evaluate every task of this env id (sorted) instead of the run's",
           "env_kwarg": "key=value environment argument (repeatable), over the run's own unless --env or --manifest "
                        "is given: --env-kwarg split=valid_unseen evaluates every game of that split",
           "greedy": "greedy decoding instead of the validation temperature 0.4",
           "limit": "only the first N tasks", "out_dir": "results folder; default RUN_DIR/eval (resumes what is there)"},
))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(ctx: typer.Context, name: str = typer.Argument(..., help="a module of the checkout's benchmarks package "
                                                                  "(python -m benchmarks.NAME; docs/benchmarks.md)")) -> None:
    """Run a benchmark of the source checkout (``benchmarks.NAME``'s ``main``); extra arguments go to it."""
    from ecpo_train.apps.bench import run_benchmark

    try:
        code = run_benchmark(name, ctx.args)
    except _input_errors() as err:
        raise fail(err) from None
    if code:
        raise typer.Exit(code)


@app.command()
def serve(
    env_id: str = typer.Argument(..., help="a registered id, e.g. ecpo/ALFWorldGen-v0"),
    host: str = typer.Option("127.0.0.1", help="address to listen on (0.0.0.0: every interface)"),
    port: int = typer.Option(8000, help="TCP port (0: a free one, printed)"),
    env_kwargs: str = typer.Option("{}", help="constructor arguments as a JSON object, e.g. '{\"depth\": 6}'"),
    max_sessions: int = typer.Option(64, help="concurrent sessions (one environment each)"),
    max_request_bytes: int = typer.Option(1 << 20, help="largest request body or WebSocket message"),
    idle_timeout: float = typer.Option(600.0, help="seconds after which a silent session is closed"),
) -> None:
    """Serve ENV_ID as an OpenEnv environment (WebSocket /ws; docs/openenv.md) until Ctrl-C."""
    try:
        from ecpo_train.integrations.openenv.server import serve as serve_env
    except ImportError as err:
        raise fail(f"ecpo serve needs the openenv extra (pip install 'ecpo[openenv]'): {err}") from None
    try:
        try:
            kwargs = json.loads(env_kwargs)
        except json.JSONDecodeError as err:
            raise ValueError(f"--env-kwargs {shown(env_kwargs)} is not JSON ({err.msg}, at character {err.pos})"
                             ) from None
        if not isinstance(kwargs, dict):
            raise TypeError(f"--env-kwargs must be a JSON object, got {env_kwargs[:80]!r}")
        serve_env(env_id, kwargs, host=host, port=port, max_sessions=max_sessions,
                  max_request_bytes=max_request_bytes, idle_timeout_s=idle_timeout)
    except _input_errors() as err:
        raise fail(err) from None


def main(argv: list[str] | None = None) -> None:
    """The ``ecpo`` console script: ``app`` with click's own usage errors (a value of the wrong type, an unknown
    option) reported by the one rule every verb follows: one ``error: ...`` line on stderr, exit status 2."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv) or ["--help"]
    try:
        code = app(args=argv, prog_name="ecpo", standalone_mode=False)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        sys.exit(1)
    except typer.TyperException as err:  # click's UsageError, BadParameter, NoSuchOption, ... (typer vendors click)
        if type(err).__name__ == "NoArgsIsHelpError":  # a command group named alone: its help, as `ecpo` alone
            app(args=[*argv, "--help"], prog_name="ecpo", standalone_mode=False)
            sys.exit(0)
        command = f"{err.ctx.command_path}: " if getattr(err, "ctx", None) is not None else ""
        typer.echo(f"error: {command}{' '.join(err.format_message().split())}", err=True)
        sys.exit(getattr(err, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
