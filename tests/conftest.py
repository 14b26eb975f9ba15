"""Fixtures shared by the LLM tests: a tiny random Qwen2 with the real Qwen2.5 tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the Qwen2.5 tokenizer the LLM tests use (one home; the test modules import it): $ECPO_TOKENIZER_DIR, else the
# copy `python scripts/device_bundle.py install` unpacks into the checkout
TOKENIZER_DIR = Path(os.environ.get("ECPO_TOKENIZER_DIR") or ROOT / "device_bundle" / "tokenizer")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer Qwen2 (hidden 64) written once per session; skipped without the Qwen2.5 tokenizer."""
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"Qwen2.5 tokenizer not found at {TOKENIZER_DIR}; set ECPO_TOKENIZER_DIR")
    from ecpo_train.runtime.models import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny"), tokenizer_path=TOKENIZER_DIR, seed=0)


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray session for one test module (2 CPUs, quiet), shut down after it."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
