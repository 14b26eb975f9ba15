"""``policy_update``'s statistics under data parallelism (two gloo processes, ``ProcessGroupReducer``) are the ones
one process reports on the same rows, also when one process holds only rows without gradient (a group whose
returns were all equal): its sums are 0, not missing from the average (they once were, and two RLlib learners then
logged twice the one learner's ``pg_loss``), and ``clip_frac`` / ``ratio_mean`` are means over the rows with
gradient in both cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ecpo_train.core.loss import UpdateSettings, policy_update
from tests.conftest import free_port

ROWS, WIDTH = 8, 3
KEYS = ("pg_loss", "clip_frac", "ratio_mean", "ratio_max_dev")


def batch():
    """Eight rows; the last four (the second process's share) have advantage 0. The current policy's log-probs
    differ from the sampling ones, so ratios leave the clip range."""
    gen = torch.Generator().manual_seed(4)
    lengths = torch.tensor([3, 1, 2, 3, 2, 3, 1, 2])
    mask = (torch.arange(WIDTH).unsqueeze(0) < lengths.unsqueeze(1)).float()
    old_logp = -torch.rand(ROWS, WIDTH, generator=gen) * mask
    current = old_logp + 0.5 * torch.randn(ROWS, WIDTH, generator=gen) * mask
    adv = torch.tensor([1.0, -0.5, 0.8, -1.2, 0.0, 0.0, 0.0, 0.0])
    return mask, old_logp, current, adv


def update(rows, reducer=None):
    mask, old_logp, current, adv = (t[rows] for t in batch())
    theta = torch.nn.Parameter(torch.zeros_like(current))

    def logprob_fn(idx):
        idx = torch.as_tensor(idx)
        return current[idx] + theta[idx], mask[idx], None

    settings = UpdateSettings(mini_batch_size=ROWS, micro_batch_size=2, kl_coef=0.0, max_grad_norm=1e9)
    return policy_update(logprob_fn, None, [theta], torch.optim.SGD([theta], lr=0.0), old_logp, mask, adv,
                         settings, np.random.default_rng(0), reducer=reducer)


def _worker(rank, port, out):
    import torch.distributed as dist

    from ecpo_train.runtime.distributed import ProcessGroupReducer

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        stats = update(slice(4 * rank, 4 * rank + 4), ProcessGroupReducer())
        if rank == 0:
            torch.save(stats, out)
    finally:
        dist.destroy_process_group()


def test_two_processes_report_one_process_statistics_when_one_holds_only_zero_advantages(tmp_path):
    import torch.multiprocessing as mp

    out = tmp_path / "stats.pt"
    mp.spawn(_worker, args=(free_port(), str(out)), nprocs=2, join=True)
    two, one = torch.load(out), update(slice(0, ROWS))
    assert one["clip_frac"] > 0 and one["pg_loss"] != 0  # the statistics are not trivially 0
    for key in KEYS:
        assert two[key] == pytest.approx(one[key], rel=1e-6, abs=1e-9), key
