"""The body of ``ecpo leaderboard`` / ``benchmarks/leaderboard.py``: options in, evaluation and tables out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ecpo_train.evaluation.build import build_agent, parse_overrides
from ecpo_train.evaluation.manifests import load_manifest, manifest_from_env
from ecpo_train.evaluation.runner import EvalSettings, evaluate, write_reports

DATA_KWARG = {"alfworld": "data_path", "webshop": "data_dir", "searchqa": "data_dir"}


def run_leaderboard(*, agent: str, manifests: list[str] | None = None, env_id: str | None = None,
                    env_kwargs: list[str] | None = None, data_dir: str | None = None, model: str | None = None,
                    checkpoint: str | None = None, backend: str = "transformers", base_url: str | None = None,
                    seeds: int = 3, temperature: float = 0.4, greedy: bool = False, trials: int = 3,
                    limit: int | None = None, out_dir: str = "leaderboard", name: str | None = None,
                    device: str = "cpu", dtype: str = "float32", max_new_tokens: int = 512,
                    progress: bool = True, report_only: bool = False) -> dict[str, Any]:
    """Evaluate one agent on manifests (or every task of ``env_id``) and rewrite the tables in ``out_dir``."""
    if report_only:
        return write_reports(out_dir)
    overrides = parse_overrides(env_kwargs)
    if env_id:
        chosen = [manifest_from_env(env_id, overrides)]
        overrides = {}
    else:
        chosen = [load_manifest(m) for m in (manifests or ["alfworld_gen", "webshop_gen"])]
    settings = EvalSettings(seeds=list(range(seeds)), limit=limit, progress=progress)
    the_agent = build_agent(agent, model=model, checkpoint=checkpoint, backend=backend, base_url=base_url,
                            temperature=0.0 if greedy else temperature, trials=trials, device=device, dtype=dtype,
                            max_new_tokens=max_new_tokens, name=name)
    for manifest in chosen:  # data folders are per benchmark, so each manifest gets its own override
        extra = dict(overrides)
        if data_dir and manifest.benchmark in DATA_KWARG:
            extra[DATA_KWARG[manifest.benchmark]] = str(Path(data_dir))
        evaluate(the_agent, [manifest], out_dir, EvalSettings(**{**settings.__dict__, "env_overrides": extra}))
    return write_reports(out_dir, the_agent.name, [m.name for m in chosen])
