"""The body of ``ecpo leaderboard`` / ``ecpo eval``: options in, evaluation and
tables out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ecpo_gym import family_of
from ecpo_gym.kwargs import shown
from ecpo_train.evaluation.build import build_agent_from, parse_overrides
from ecpo_train.evaluation.manifests import load_manifest, manifest_from_env
from ecpo_train.evaluation.options import LeaderboardOptions, error_line
from ecpo_train.evaluation.runner import EvalSettings, evaluate, write_reports

DEFAULT_MANIFESTS = ["alfworld_gen", "webshop_gen"]


def run_leaderboard(options: LeaderboardOptions) -> dict[str, Any]:
    """Evaluate one agent on manifests (or every task of ``options.env``) and rewrite the tables in
    ``options.out_dir``; returns the agent's results dict (``markdown`` holds the tables)."""
    options.check()
    out_dir = str(options.out_dir)
    if options.report_only:
        return write_reports(out_dir)
    overrides = parse_overrides(options.env_kwarg)

    def data_override(env_id: str) -> dict[str, str]:
        """``--data-dir`` as the data argument ``env_id`` declares (``EnvFamily.data_kwarg``; nothing for generated
        environments or ids that are not ECPO's)."""
        family = family_of(env_id)
        if not options.data_dir or family is None or family.data_kwarg is None:
            return {}
        return {family.data_kwarg: str(Path(options.data_dir))}

    if options.env:  # listing the env's tasks already needs its data folder
        chosen = [manifest_from_env(options.env, {**data_override(options.env), **overrides})]
        overrides = {}
    else:
        chosen = [load_manifest(m) for m in (options.manifest or DEFAULT_MANIFESTS)]
    if options.data_dir and not any(getattr(family_of(m.env_id), "data_kwarg", None) for m in chosen):
        raise ValueError(f"--data-dir {shown(options.data_dir)} would be ignored: no environment evaluated here reads "
                         f"a data folder ({', '.join(sorted({m.env_id for m in chosen}))}); leave it out")
    agent = build_agent_from(options)
    for manifest in chosen:
        settings = EvalSettings(seeds=list(range(options.seeds)), limit=options.limit, progress=options.progress,
                                env_overrides={**data_override(manifest.env_id), **overrides})
        evaluate(agent, [manifest], out_dir, settings)
    return write_reports(out_dir, agent.name, [m.name for m in chosen])


def leaderboard_command(options: LeaderboardOptions) -> None:
    """Evaluate an agent on fixed task lists and print the paper's tables (mean ± std over seeds).

    The body of ``ecpo leaderboard``: bad input is one line and exit 2."""
    import gymnasium as gym
    import typer

    try:
        result = run_leaderboard(options)
    except (ValueError, TypeError, KeyError, OSError, gym.error.Error) as err:  # OSError: a missing model, a
        typer.echo(f"error: {error_line(err)}", err=True)  # path under a file, an unreachable endpoint
        raise typer.Exit(2) from None
    typer.echo(result["markdown"])
