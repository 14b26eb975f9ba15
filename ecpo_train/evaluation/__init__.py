"""Leaderboard evaluation: agents, fixed task manifests, a resumable runner and the paper's tables."""

from ecpo_train.evaluation.manifests import (
           TaskGroup,
           TaskManifest,
           available_manifests,
           load_manifest,
           manifest_from_env,
)
from ecpo_train.evaluation.runner import EvalSettings, evaluate, write_reports

__all__ = ["EvalSettings", "TaskGroup", "TaskManifest", "available_manifests", "evaluate", "load_manifest",
           "manifest_from_env", "write_reports"]
