"""The engines the integrations add to the run shell, declared to ``runtime/engines.py``: the RLlib one (``ecpo train
--engine rllib``: ``integrations/rllib/llm/engine.py``).

Importing this module imports no ray (the package root imports it, so every process knows the folders these
engines write); the engine's class loads when a run is built with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ecpo_train.runtime.engines import EngineOption, EngineSpec, register_engine


def _recorded_config(folder: Any, checkpoint: Path) -> dict[str, Any] | None:
    """The run's ``config.yaml`` (the RLlib checkpoint keeps its config for the algorithm, not for the run shell)."""
    from ecpo_train.runtime.run_dir import read_saved_config

    return read_saved_config(folder.config)


def _rllib_settings(options: Mapping[str, Any], nproc: int) -> dict[str, Any]:
    """The actors' sizes given on the command line as ``RLlibEngine``'s keyword arguments (one line, exit 2 on bad
    input, before any actor starts)."""
    from ecpo_gym.kwargs import shown

    if nproc:
        raise ValueError("--nproc is the native trainer's FSDP; with --engine rllib use --learners K")
    env_runners, learners, actor_cpus = options["env_runners"], options["learners"], options["actor_cpus"]
    if env_runners < 0 or learners < 0:
        raise ValueError("--env-runners and --learners must be >= 0")
    if not (math.isfinite(actor_cpus) and 0 < actor_cpus <= 64):
        raise ValueError(f"--actor-cpus {shown(actor_cpus)}: give a number of CPUs > 0 and <= 64")
    return {"num_env_runners": env_runners, "num_learners": learners, "actor_cpus": actor_cpus}


RLLIB = register_engine(EngineSpec(
    name="rllib", engine="ecpo_train.integrations.rllib.llm.engine:RLlibEngine", checkpoint="rllib_checkpoint",
    read_config=_recorded_config, summary="the same run through the RLlib ECPO algorithm (env runners as Ray actors)",
    files="metrics.jsonl, rllib_checkpoint/, curves.png",
    options=(EngineOption("env_runners", 2, "env-runner actors (0 = sample in the driver)"),
             EngineOption("learners", 0, "learner actors (0 = learn in the driver)"),
             EngineOption("actor_cpus", 1.0, "CPUs Ray reserves for each runner and learner actor (0.5: 2 runners and "
                                             "2 learners on a 2-core machine)")),
    options_are="has actors to size", settings=_rllib_settings))
