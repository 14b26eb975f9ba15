"""The body of ``ecpo leaderboard`` / ``benchmarks/leaderboard.py``: options in, evaluation and tables out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ecpo_train.evaluation.agents import VALIDATION_TEMPERATURE
from ecpo_train.evaluation.build import build_agent, parse_overrides
from ecpo_train.evaluation.manifests import load_manifest, manifest_from_env
from ecpo_train.evaluation.runner import EvalSettings, evaluate, write_reports

# the constructor argument naming the data folder of each real-data environment (generated ones take none)
DATA_KWARG = {"ecpo/ALFWorld-v0": "data_path", "ecpo/WebShop-v0": "data_dir", "ecpo/SearchQA-v0": "data_dir"}


def run_leaderboard(*, agent: str, manifests: list[str] | None = None, env_id: str | None = None,
                    env_kwargs: list[str] | None = None, data_dir: str | None = None, model: str | None = None,
                    checkpoint: str | None = None, backend: str = "transformers", base_url: str | None = None,
                    seeds: int = 3, temperature: float = VALIDATION_TEMPERATURE, greedy: bool = False,
                    trials: int = 3, limit: int | None = None, out_dir: str = "leaderboard", name: str | None = None,
                    device: str = "cpu", dtype: str = "float32", max_new_tokens: int = 512,
                    progress: bool = True, report_only: bool = False) -> dict[str, Any]:
    """Evaluate one agent on manifests (or every task of ``env_id``) and rewrite the tables in ``out_dir``."""
    if report_only:
        return write_reports(out_dir)
    overrides = parse_overrides(env_kwargs)

    def data_override(env: str) -> dict[str, str]:
        """``--data-dir`` as the argument of the real-data environment ``env`` (nothing for generated ones)."""
        return {DATA_KWARG[env]: str(Path(data_dir))} if data_dir and env in DATA_KWARG else {}

    if env_id:  # listing the env's tasks already needs its data folder
        chosen = [manifest_from_env(env_id, {**data_override(env_id), **overrides})]
        overrides = {}
    else:
        chosen = [load_manifest(m) for m in (manifests or ["alfworld_gen", "webshop_gen"])]
    the_agent = build_agent(agent, model=model, checkpoint=checkpoint, backend=backend, base_url=base_url,
                            temperature=0.0 if greedy else temperature, trials=trials, device=device, dtype=dtype,
                            max_new_tokens=max_new_tokens, name=name)
    for manifest in chosen:
        settings = EvalSettings(seeds=list(range(seeds)), limit=limit, progress=progress,
                                env_overrides={**data_override(manifest.env_id), **overrides})
        evaluate(the_agent, [manifest], out_dir, settings)
    return write_reports(out_dir, the_agent.name, [m.name for m in chosen])
