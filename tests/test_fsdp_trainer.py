"""The native trainer under ``fsdp=true``: two gloo processes (CPU) run one iteration of Algorithm 1 on the
tiny random Qwen2 and end it with the single process's loss, metrics and weights.

Rollouts are greedy (temperature 0, which the policies support, set past the config's sampling check) so both
runs play the very same episodes: each process plays its share of whole groups with the env seeds those copies
get in the one-process batch, and the corridor's random doors (advance probability 0.5) still make the returns
of a group differ, so the credit and the update are not trivial. SGD replaces AdamW in both runs: the updated
weights are then the gradient itself (Adam's first step would magnify float noise on ~0 gradients).
"""

import os
from pathlib import Path

import pytest
import torch
from conftest import free_port

ENV_ID = "ecpo/DivergentAnchor-v0"




def _config(model_dir: str, run_dir: str, fsdp: bool):
    from ecpo_train.runtime.config import make_config

    config = make_config({
        "run_dir": run_dir, "model": model_dir, "device": "cpu", "policy_mode": "score", "prompt_style": "compact",
        "history_length": 0, "env_id": ENV_ID, "seed": 2,
        "env_kwargs": {"depth": 2, "branching": 2, "num_tasks": 2, "max_steps": 2, "good_prob": 0.5,
                       "rare_prob": [0.5, 0.5]},
        "n_groups": 2, "group_size": 2, "max_prompt_length": 512, "iterations": 1, "val_every": 0,
        "val_num_tasks": 2, "kl_coef": 0.05, "entropy_coef": 0.01, "mini_batch_size": 64, "micro_batch_size": 1,
        "num_epochs": 1, "tensorboard": False, "progress": False, "fsdp": fsdp,
    })
    config.rollout_temperature = 0.0  # greedy: both runs play the same episodes
    return config


def _one_iteration(config) -> dict:
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    torch.set_num_threads(1)
    with open_run(Trainer, config) as run:  # under FSDP every process builds, process 0 writes
        trainer = run.engine
        trainer.optimizer = trainer.learner.optimizer = torch.optim.SGD(
            [p for p in trainer.policy.parameters() if p.requires_grad], lr=1.0)
        metrics = trainer.train_iteration()
        validation = run.validate()
        run.save()
        return {"metrics": metrics, "validation": validation, "main": trainer.writes}


def _worker(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    result = _one_iteration(_config(model_dir, str(Path(out_dir) / "run"), fsdp=True))
    if result["main"]:
        torch.save(result, Path(out_dir) / "fsdp.pt")


@pytest.mark.slow
def test_fsdp_trainer_iteration_on_two_processes_matches_one_process(tiny_model_dir, tmp_path):
    import torch.multiprocessing as mp

    sharded_dir, single_dir = tmp_path / "fsdp", tmp_path / "single"
    sharded_dir.mkdir()
    mp.spawn(_worker, args=(2, free_port(), str(tiny_model_dir), str(sharded_dir)), nprocs=2, join=True)
    sharded = torch.load(sharded_dir / "fsdp.pt", weights_only=False)
    single = _one_iteration(_config(str(tiny_model_dir), str(single_dir / "run"), fsdp=False))

    got, want = sharded["metrics"], single["metrics"]
    for key in ("num_steps", "credit/num_rows", "credit/num_trajectories", "credit/num_groups"):
        assert got[key] == want[key], key  # counts add up over processes
    for key in ("success", "reward_mean", "episode_length", "update/kl", "update/clip_frac"):
        assert got[key] == pytest.approx(want[key], abs=1e-9), key
    # seed 2: the returns of a group differ, so ECPO's advantages and the policy-gradient loss are not 0
    assert want["credit/advantage_std"] > 0.1 and abs(want["update/pg_loss"]) > 1e-3
    for key in ("update/pg_loss", "update/entropy", "update/ratio_mean"):
        assert got[key] == pytest.approx(want[key], abs=1e-6), key
    assert got["update/grad_norm"] == pytest.approx(want["update/grad_norm"], rel=1e-5)
    assert sharded["validation"]["val/exact_success"] == pytest.approx(single["validation"]["val/exact_success"],
                                                                       abs=1e-6)
    # process 0 wrote the run folder: the checkpoint holds the full (unsharded) weights of the one-process run
    got_state = torch.load(sharded_dir / "run" / "checkpoint.pt", weights_only=False)["policy"]
    want_state = torch.load(single_dir / "run" / "checkpoint.pt", weights_only=False)["policy"]
    assert got_state.keys() == want_state.keys()
    initial = __import__("transformers").AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).state_dict()
    moved = 0
    for name, value in want_state.items():
        assert torch.allclose(got_state[name], value, atol=1e-6), name
        moved += not torch.equal(value, initial[name.removeprefix("model.")])
    assert moved > 0
    assert (sharded_dir / "run" / "config.yaml").exists()


def test_nproc_below_two_is_one_clear_error(tmp_path):
    from typer.testing import CliRunner

    from ecpo_train.apps.cli import app

    result = CliRunner().invoke(app, ["train", "--config", "quickstart", "--nproc", "1"])
    assert result.exit_code == 2
    assert "at least 2 processes" in result.output


@pytest.mark.parametrize(("extra", "words"), [
    (["--nproc", "2", "fsdp=false"], "'fsdp=false': --nproc 2 runs FSDP (fsdp=true); leave it out"),
    (["--nproc", "100000"], "--nproc 100000: at most"),
    (["--nproc", "3"], "n_groups=2 must be a multiple of --nproc 3"),
])
def test_nproc_is_checked_against_the_run_before_any_process_starts(monkeypatch, tmp_path, extra, words):
    """``fsdp=false`` beside ``--nproc`` was dropped (the run sharded anyway), 100,000 processes were launched, and
    groups that do not split whole were refused once in each of the K processes."""
    import subprocess

    from typer.testing import CliRunner

    from ecpo_train.apps.cli import app

    def launched(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "call", launched)
    result = CliRunner().invoke(app, ["train", "--config", "corridor_llm", f"run_dir={tmp_path / 'run'}",
                                      "model=some/model", *extra])
    lines = result.output.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {words}"), result.output
    assert not (tmp_path / "run").exists()


def test_fsdp_needs_n_groups_divisible_by_the_processes(monkeypatch, tmp_path):
    from ecpo_train.runtime import distributed
    from ecpo_train.runtime.trainer import Trainer

    class FakeParallel:
        world_size, rank, is_main, device = 3, 0, True, "cpu"

        def __init__(self, device):
            pass

    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setattr(distributed, "DataParallel", FakeParallel)
    config = _config("unused", str(tmp_path / "run"), fsdp=True)
    with pytest.raises(ValueError, match="n_groups=2 must be a multiple of the 3 processes"):
        Trainer(config)


def _load_damaged(rank: int, world: int, port: int, model_dir: str, out_dir: str, damaged: str) -> None:
    """Build the sharded trainer, then load a checkpoint state whose weight is nan: each process must refuse it in
    one ``ValueError`` naming the checkpoint (written to ``refused-<rank>.txt``), before any shard takes it."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.trainer import Trainer

    torch.set_num_threads(1)
    state = torch.load(damaged, weights_only=False)
    with open_run(Trainer, _config(model_dir, str(Path(out_dir) / "run"), fsdp=True)) as run:
        try:
            run.engine.load_state(state, Path(damaged))
        except ValueError as err:
            (Path(out_dir) / f"refused-{rank}.txt").write_text(str(err))


@pytest.mark.slow
def test_a_damaged_policy_state_is_one_line_under_fsdp_too(tiny_model_dir, tmp_path):
    """Issue 70 (item 8, the sharded branch): FSDP's loader gets the same checks as the unsharded one."""
    import torch.multiprocessing as mp

    from ecpo_train.runtime.checkpoint_io import save_checkpoint

    single = tmp_path / "single"
    _one_iteration(_config(str(tiny_model_dir), str(single / "run"), fsdp=False))
    state = torch.load(single / "run" / "checkpoint.pt", weights_only=False)
    name = next(iter(state["policy"]))
    state["policy"][name] = torch.full_like(state["policy"][name], float("nan"))
    damaged = tmp_path / "damaged.pt"
    save_checkpoint(state, damaged)  # its own sha256 is right: the state itself is what is damaged
    sharded = tmp_path / "fsdp"
    sharded.mkdir()
    mp.spawn(_load_damaged, args=(2, free_port(), str(tiny_model_dir), str(sharded), str(damaged)), nprocs=2,
             join=True)
    for rank in (0, 1):
        message = (sharded / f"refused-{rank}.txt").read_text()
        assert "nan or infinite" in message and str(damaged) in message and "\n" not in message
