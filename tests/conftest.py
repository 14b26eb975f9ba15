"""Fixtures shared by the test modules: the benchmark data folder (tests marked ``data`` skip without it), a tiny
random Qwen2 with the real Qwen2.5 tokenizer, a local Ray session; and the helpers several modules import from
here: a quick ``ecpo train``, the small corridor run of the engine-equality tests, an LLM policy, a free port."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the Qwen2.5 tokenizer the LLM tests use (one home; the test modules import it): $ECPO_TOKENIZER_DIR, else the
# copy `python scripts/device_bundle.py install` unpacks into the checkout
TOKENIZER_DIR = Path(os.environ.get("ECPO_TOKENIZER_DIR") or ROOT / "device_bundle" / "tokenizer")
# the benchmark data folder (alfworld/, webshop/, searchqa/; docs/environments.md): $ECPO_DATA_DIR, None where unset
DATA_DIR = Path(os.environ["ECPO_DATA_DIR"]) if os.environ.get("ECPO_DATA_DIR") else None
NO_DATA = "set ECPO_DATA_DIR to the benchmark data folder (alfworld/, webshop/, searchqa/)"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``data`` needs the real benchmark data: skipped, with one reason, where it is missing."""
    if DATA_DIR is None and item.get_closest_marker("data") is not None:
        pytest.skip(NO_DATA)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` first, in their order: on several workers (``make test``) the long ones start early
    and the short ones fill the end, so that no worker waits alone on a long test at the close."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark data folder; the test is skipped where ``$ECPO_DATA_DIR`` is unset."""
    if DATA_DIR is None:
        pytest.skip(NO_DATA)
    return DATA_DIR


@pytest.fixture(scope="session")
def webshop_dir(data_dir: Path) -> Path:
    """``$ECPO_DATA_DIR/webshop``: the WebShop sample catalogue, its attributes and the fixed tasks (skipped
    where they are missing)."""
    path = data_dir / "webshop"
    needed = ("sample/items_shuffle_sample.json", "items_ins_v2_1000.json", "expel_webshop.fixed100.json")
    missing = [name for name in needed if not (path / name).is_file()]
    if missing:
        pytest.skip(f"no {', '.join(missing)} under {path}")
    return path


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


# ---------------------------------------------------------------------------------------------- helpers
QUICK = ["n_groups=2", "group_size=2", "val_every=0", "progress=false", "tensorboard=false"]  # seconds an iteration
CORRIDOR = {"num_tasks": 2, "depth": 4, "rare_prob": [0.4, 0.7]}
ENV_ID = "ecpo/DivergentAnchor-v0"


def train(run_dir: Path, *extra: str, sizes: list[str] = QUICK) -> Any:
    """``ecpo train --config quickstart`` into ``run_dir`` at ``sizes``, in this process (typer's runner; a
    setting in ``extra`` wins over the same one in ``sizes``)."""
    from typer.testing import CliRunner

    from ecpo_train.apps.cli import app

    return CliRunner().invoke(app, ["train", "--config", "quickstart", f"run_dir={run_dir}", *sizes, *extra])


def run_values(model: Path | str, tmp_path: Path, **changes: Any) -> dict[str, Any]:
    """A small scoring run on the corridors (the tiny Qwen2 at ``model``), as native ``TrainConfig`` values: the
    run both engines train in the equality tests; ``changes`` override. One torch thread in every process of the
    run (the driver, the runner and learner actors): the thread count changes float summation order, so the
    engines' equality holds however pytest was started (with ``OMP_NUM_THREADS=1`` or without)."""
    values = {"run_dir": str(tmp_path / "native"), "policy": "llm", "policy_mode": "score", "model": str(model),
              "device": "cpu", "env_id": ENV_ID, "env_kwargs": dict(CORRIDOR), "n_groups": 2, "group_size": 4,
              "history_length": 0, "prompt_style": "compact", "val_every": 0, "credit": {"d_min": 1}, "lr": 1e-3,
              "kl_coef": 0.0, "mini_batch_size": 8, "micro_batch_size": 4, "num_epochs": 2, "seed": 5,
              "checkpoint_every": 0, "tensorboard": False, "progress": False, "iterations": 3, "threads": 1}
    values |= changes
    from ecpo_train.runtime.config import POLICY_SETTINGS

    # another policy kind than the LLM's: the LLM's own settings left out (a run refuses a setting it would not read)
    return {key: value for key, value in values.items()
            if key not in POLICY_SETTINGS["llm"] or key in POLICY_SETTINGS[values["policy"]] or key in changes}


def small_values(model: Path | str, tmp_path: Path, **changes: Any) -> dict[str, Any]:
    """``run_values`` with a KL term and one epoch, in ``tmp_path/run``, for the preset's iteration count: the run
    the RLlib user and module tests build."""
    values = run_values(model, tmp_path, run_dir=str(tmp_path / "run"), kl_coef=0.01, num_epochs=1)
    del values["iterations"]
    return values | changes


def next_iteration_twice(algo: Any, checkpoint: Path) -> tuple[dict[str, Any], Any]:
    """Save ``algo`` to ``checkpoint``, train its next iteration and stop it; restore the checkpoint. Returned: that
    uninterrupted iteration's ``ecpo`` result and the restored algorithm (the caller trains and stops it)."""
    from ecpo_train.integrations.rllib import ECPO

    try:
        algo.save_to_path(str(checkpoint))
        uninterrupted = algo.train()["ecpo"]
    finally:
        algo.stop()
    return uninterrupted, ECPO.from_checkpoint(str(checkpoint))


def make_policy(model_dir: Path | str, **kwargs: Any) -> Any:
    """A ``TransformersPolicy`` over the model at ``model_dir`` on the corridors (64 prompt, 6 reply tokens)."""
    from ecpo_train.policies.llm import TransformersPolicy

    return TransformersPolicy(str(model_dir), env_name=ENV_ID, max_prompt_length=64, max_response_length=6, **kwargs)


def lora_policy(model_dir: Path | str, lora: dict[str, Any]) -> Any:
    """:func:`make_policy` with LoRA adapters whose ``lora_B`` is drawn away from its zero start (seed 0), so that the
    adapter changes what the model computes (a merged adapter at its start would equal the base model)."""
    import torch

    torch.manual_seed(0)
    policy = make_policy(model_dir, lora=lora)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return policy


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a process group's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------- the GPU machine
def python312() -> str | None:
    """A Python 3.12 interpreter here (the GPU machine's version), or None."""
    for candidate in [shutil.which("python3.12"), *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))]:
        if candidate and subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def device_site(folder: Path, ray: bool = False) -> Path:
    """A site folder holding only what the GPU machine will have: links to the installed files of torch,
    transformers, peft and what they require, and of the bundle's distributions (scripts/device_bundle.py); with
    ``ray``, also numpy, pandas, pyarrow and what they require, and the Ray wheels (``device_bundle_ray.py build``)."""
    import re
    from importlib.metadata import distributions

    allowed = device_allowed(ray)
    folder.mkdir()
    for dist in distributions():
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower() not in allowed:
            continue
        for top in {Path(f).parts[0] for f in dist.files or []}:
            source = Path(dist.locate_file(top))
            if top != ".." and source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return folder


def device_allowed(ray: bool = False) -> set[str]:
    """The distributions ``device_site`` holds."""
    import device_bundle as bundle
    import device_bundle_ray

    if ray:
        return (bundle.device_distributions(device_bundle_ray.RAY_DEVICE_ROOTS) | set(bundle.BUNDLED)
                | set(device_bundle_ray.RAY_BUNDLED))
    return bundle.device_distributions() | set(bundle.BUNDLED)
