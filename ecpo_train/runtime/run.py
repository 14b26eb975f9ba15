"""The run loop both engines drive: validate the untrained policy, iterate to the target, log, checkpoint.

The native ``Trainer.train`` and the RLlib engine (``integrations/rllib/llm/engine.py``) hand it their own pieces
(one iteration, one validation, the log, the checkpoint writer); the order and the cadence are written here once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_iterations(config: Any, *, position: Callable[[], int], target: int, iterate: Callable[[], dict],
                   validate: Callable[[], dict], log: Callable[[dict], None], checkpoint: Callable[[], Any],
                   on_iteration: Callable[[dict], None] | None = None) -> None:
    """Train from ``position()`` (iterations done) to ``target``.

    A run at iteration 0 that validates before training (``val_every`` and ``val_before_training``) logs the
    untrained policy's validation as iteration 0 (no training keys). Every iteration's metrics are logged, then
    passed to ``on_iteration``; a checkpoint is written every ``checkpoint_every`` iterations and once at the end.
    """
    if position() == 0 and config.val_every and config.val_before_training:
        log({"iteration": 0.0} | validate())
    while position() < target:
        metrics = iterate()
        log(metrics)
        if on_iteration is not None:
            on_iteration(metrics)
        if config.checkpoint_every and position() % config.checkpoint_every == 0:
            checkpoint()
    checkpoint()
