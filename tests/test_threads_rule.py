"""The torch thread rule of the small text policy's recipe (docs/cpu_training.md): one thread, asked for by its
presets, run by the registered study, and honoured by the warm start and the trainer, whatever count torch (or
``OMP_NUM_THREADS``) had before."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ecpo_train.runtime.config import load_config


def test_the_text_presets_and_the_study_run_on_one_thread():
    from benchmarks.alfworld_text import HOUSEHOLDS, train_command

    assert load_config("alfworld_text").threads == load_config("households_text").threads == 1
    for bed in (None, HOUSEHOLDS):
        command = train_command(Path("run"), Path("warm"), "ecpo", 1, 20, *([bed] if bed else []))
        assert [word for word in command if word.startswith("threads=")] == ["threads=1"]


@pytest.fixture
def two_threads():
    """Torch on 2 threads for the test (as a process started without ``OMP_NUM_THREADS`` on 2 cores), restored
    after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_the_warm_start_and_the_trainer_run_on_the_presets_threads(tmp_path, two_threads):
    """``ecpo sft --config households_text`` and the trainer built from it run torch on the preset's one thread
    (before, the warm start ignored ``threads`` and the trainer applied it only at its first update)."""
    from ecpo_train.runtime.sft import run_sft
    from ecpo_train.runtime.trainer import Trainer

    config = load_config("households_text", [f"run_dir={tmp_path / 'run'}", "env_kwargs.num_tasks=6",
                                             "val_tasks=null", "val_num_tasks=2", "progress=false"])
    run_sft(config, episodes=2, epochs=1, lr=1e-3, out=tmp_path / "warm", batch_size=8)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    trainer = Trainer(config)
    try:
        assert torch.get_num_threads() == 1
    finally:
        trainer.close()
