"""ecpo_train: ECPO's credit, the rollout-to-loss core, policies, the trainers and their integrations.

The layers, one folder each (``docs/ARCHITECTURE.md``):

- ``core/``: the algorithm: ``rollout`` (the one episode loop), ``batch`` (the step-row table), ``credit/`` (the
  paper's estimators) and ``loss`` (the clipped token-level objective);
- ``policies/``: what acts (LLM generation and scoring, tabular, the PPO critic) and its helpers (prompting,
  LoRA, memory settings);
- ``runtime/``: what drives the core (the native trainer, its config, run folders, distributed sharding);
- ``apps/``: the ``ecpo`` command line, the demo, SFT warm starts and model downloads;
- ``integrations/``: RLlib (``ECPOConfig``) and the verl-agent drop-in;
- ``evaluation/``: the leaderboard.

The public names are importable from here without importing torch or ray up front:
``compute_advantages``, ``CreditConfig``, ``TrajectoryBatch`` and ``ECPOConfig``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# every engine the package ships is declared whatever a process imports first, so that any run folder one of them
# wrote is recognised (runtime/engines.py; importing this imports no ray)
from ecpo_train.integrations import engines as _engines  # noqa: F401

_PUBLIC = {
    "compute_advantages": "ecpo_train.core.credit",
    "CreditConfig": "ecpo_train.core.credit",
    "TrajectoryBatch": "ecpo_train.core.batch",
    "ECPOConfig": "ecpo_train.integrations.rllib",
    "ECPO": "ecpo_train.integrations.rllib",
}


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'ecpo_train' has no attribute {name!r}")


__all__ = ["ECPO", "CreditConfig", "ECPOConfig", "TrajectoryBatch", "compute_advantages"]
