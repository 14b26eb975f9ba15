"""FSDP2 on a tiny random Qwen2 (CPU, two gloo processes): sharded sampling with gathered weights does not
deadlock, and one sharded update (full weights or LoRA, uneven token budgets per process) ends with the single
process's loss, gradient norm and weights."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import free_port, make_policy
from test_scale import LORA, fixed_batch, run_update

from ecpo_train.core.loss import UpdateSettings


def _fsdp_worker(rank: int, world: int, port: int, model_dir: str, out_dir: str, lora: dict | None) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from ecpo_train.runtime.distributed import DataParallel

    dp = DataParallel("cpu")
    try:
        torch.manual_seed(0)
        policy = make_policy(model_dir, lora=lora)
        reference = policy.frozen_copy()
        batch = fixed_batch(policy)
        groups = dp.local_share(sorted(set(batch["group"].tolist())))
        rows = np.flatnonzero(np.isin(batch["group"], groups))
        dp.shard(policy.model)
        if lora is None:
            dp.shard(reference.model)
        # sampling with gathered weights: uneven prompts and early stops on each process, no deadlock
        with dp.gathered(policy.model), torch.no_grad():
            greedy = policy.sample([batch["prompts"][i] for i in rows[: 1 + dp.rank]], temperature=0.0)[0]
        params = [p for p in policy.parameters() if p.requires_grad]
        optimizer = torch.optim.SGD(params, lr=0.5)
        settings = UpdateSettings(mini_batch_size=10_000, micro_batch_size=2, kl_coef=0.05,
                                  max_tokens_per_micro_batch=30 if dp.rank == 0 else 0)
        stats = run_update(policy, reference, batch, settings, rows=rows, optimizer=optimizer, reducer=dp)
        state = dp.full_state_dict(policy)
        if dp.is_main:
            torch.save({"stats": stats, "state": state, "greedy": greedy, "rows": rows}, Path(out_dir) / "fsdp.pt")
    finally:
        dp.close()


@pytest.mark.slow
@pytest.mark.parametrize("lora", [None, LORA], ids=["full", "lora"])
def test_fsdp2_two_processes_match_one_process(tiny_model_dir, tmp_path, lora):
    import torch.multiprocessing as mp

    mp.spawn(_fsdp_worker, args=(2, free_port(), str(tiny_model_dir), str(tmp_path), lora), nprocs=2, join=True)
    sharded = torch.load(tmp_path / "fsdp.pt", weights_only=False)

    torch.manual_seed(0)
    policy = make_policy(tiny_model_dir, lora=lora)
    reference = policy.frozen_copy()
    batch = fixed_batch(policy)
    params = [p for p in policy.parameters() if p.requires_grad]
    # SGD: the updated weights are the gradient itself (Adam's step would magnify float noise on ~0 gradients)
    optimizer = torch.optim.SGD(params, lr=0.5)
    settings = UpdateSettings(mini_batch_size=10_000, micro_batch_size=3, kl_coef=0.05)
    with torch.no_grad():
        greedy = policy.sample([batch["prompts"][i] for i in sharded["rows"][:1]], temperature=0.0)[0]
    stats = run_update(policy, reference, batch, settings, optimizer=optimizer)

    assert sharded["greedy"] == greedy
    for key in ("pg_loss", "kl", "clip_frac", "ratio_mean"):
        assert sharded["stats"][key] == pytest.approx(stats[key], abs=1e-6), key
    assert sharded["stats"]["grad_norm"] == pytest.approx(stats["grad_norm"], rel=1e-5)
    expected = policy.state_dict()
    assert sharded["state"].keys() == expected.keys()
    for name, value in expected.items():
        assert torch.allclose(sharded["state"][name], value, atol=1e-6), name
