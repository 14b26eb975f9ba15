"""eq. ecpo_objective against hand-computed values: clipping on both sides, masking, k3 KL, accumulation."""

import math

import numpy as np
import pytest
import torch

from ecpo_train.core.loss import (
    UpdateSettings,
    assign_step_advantage,
    clipped_surrogate,
    ecpo_objective_loss,
    kl_k3,
    masked_token_mean,
    policy_update,
)


def test_clipped_surrogate_clips_on_both_sides():
    old = torch.zeros(4)
    # ratios 1.5 (A>0: clipped to 1.2), 0.5 (A<0: clipped to 0.8), 1.5 (A<0: unclipped 1.5), 0.5 (A>0: 0.5)
    logp = torch.log(torch.tensor([1.5, 0.5, 1.5, 0.5]))
    adv = torch.tensor([2.0, -2.0, -2.0, 2.0])
    got = clipped_surrogate(logp, old, adv, clip_eps=0.2)
    want = torch.tensor([1.2 * 2.0, 0.8 * -2.0, 1.5 * -2.0, 0.5 * 2.0])
    assert torch.allclose(got, want, atol=1e-6)


def test_kl_k3_values():
    logp = torch.log(torch.tensor([0.5, 0.2, 0.3]))
    ref = torch.log(torch.tensor([0.25, 0.2, 0.6]))
    got = kl_k3(logp, ref)
    # r = ref/p: 0.5, 1.0, 2.0 -> r - log r - 1
    want = torch.tensor([0.5 - math.log(0.5) - 1, 0.0, 2.0 - math.log(2.0) - 1])
    assert torch.allclose(got, want, atol=1e-6)
    assert float(kl_k3(logp, logp).abs().max()) == 0.0


def test_loss_masks_padding_and_takes_token_mean():
    # two actions: 2 tokens and 1 token (+1 padding token with absurd values that must not count)
    logp = torch.log(torch.tensor([[1.1, 1.0], [0.7, 50.0]]))
    old = torch.zeros(2, 2)
    ref = torch.log(torch.tensor([[1.1, 0.5], [0.7, 1e-9]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = assign_step_advantage(torch.tensor([1.0, -3.0]), mask)
    loss, stats = ecpo_objective_loss(logp, old, ref, adv, mask, clip_eps=0.2, kl_coef=0.1)
    # surrogate per token: 1.1*1 ; 1.0*1 ; min(0.7*-3, 0.8*-3) = -2.4
    surrogate_mean = (1.1 + 1.0 - 2.4) / 3
    kl_tokens = [0.0, 0.5 - math.log(0.5) - 1, 0.0]  # ratio ref/p = 1, 0.5, 1
    kl_mean = sum(kl_tokens) / 3
    assert stats["pg_loss"] == pytest.approx(-surrogate_mean, abs=1e-6)
    assert stats["kl"] == pytest.approx(kl_mean, abs=1e-6)
    assert float(loss) == pytest.approx(-surrogate_mean + 0.1 * kl_mean, abs=1e-6)
    # one of three tokens is clipped (ratio 0.7 < 0.8 with A < 0)
    assert stats["clip_frac"] == pytest.approx(1 / 3, abs=1e-6)


def test_entropy_bonus_lowers_loss():
    logp = torch.zeros(1, 1)
    mask = torch.ones(1, 1)
    entropy = torch.full((1, 1), 2.0)
    loss, stats = ecpo_objective_loss(logp, logp, None, mask * 0.0, mask, entropy=entropy, entropy_coef=0.5)
    assert float(loss) == pytest.approx(-1.0)
    assert stats["entropy"] == pytest.approx(2.0)


def test_masked_mean_with_external_denominator():
    values = torch.tensor([[2.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0]])
    assert float(masked_token_mean(values, mask)) == pytest.approx(3.0)
    assert float(masked_token_mean(values, mask, denominator=6.0)) == pytest.approx(1.0)


def test_micro_batch_accumulation_equals_full_batch_gradient():
    """Gradient of one mini-batch split into micro-batches equals the gradient of the whole mini-batch."""
    torch.manual_seed(0)
    rows, width = 6, 3
    lengths = torch.tensor([3, 1, 2, 3, 2, 1])
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    old_logp = -torch.rand(rows, width) * mask
    adv = torch.randn(rows)

    def run(micro: int) -> torch.Tensor:
        theta = torch.nn.Parameter(torch.zeros(rows, width))

        def logprob_fn(idx):
            idx = torch.as_tensor(idx)
            return old_logp[idx] + theta[idx], mask[idx], None

        grads = []

        class Capture(torch.optim.SGD):
            def step(self, closure=None):
                grads.append(theta.grad.clone())
                return super().step(closure)

        opt = Capture([theta], lr=0.0)
        settings = UpdateSettings(mini_batch_size=rows, micro_batch_size=micro, kl_coef=0.0, max_grad_norm=1e9)
        policy_update(logprob_fn, None, [theta], opt, old_logp, mask, adv, settings, np.random.default_rng(0))
        return grads[0]

    full, split = run(rows), run(2)
    assert torch.allclose(full, split, atol=1e-7)
    # d(-mean_tokens(q*A))/dtheta at q=1 is -A / n_tokens on every real token
    want = -(adv.unsqueeze(1) * mask) / mask.sum()
    assert torch.allclose(full, want, atol=1e-7)


def test_trajectory_mean_weights_give_every_episode_the_same_total_weight():
    from ecpo_train.core.loss import trajectory_mean_weights

    traj = ["a", "b", "b", "b", "c", "c"]  # lengths 1, 3, 2; mean length 2
    w = trajectory_mean_weights(traj)
    assert w.tolist() == pytest.approx([2.0, 2 / 3, 2 / 3, 2 / 3, 1.0, 1.0])
    assert w.mean() == pytest.approx(1.0)  # the update keeps token-mean's scale
    assert {t: sum(x for u, x in zip(traj, w) if u == t) for t in "abc"} == pytest.approx({"a": 2, "b": 2, "c": 2})
    assert trajectory_mean_weights(["x", "x", "y", "y"]).tolist() == [1.0] * 4  # equal lengths: token-mean


def test_trajectory_mean_gradient_is_the_mean_over_episodes_of_each_episode_row_mean():
    """With the weights on the advantages, policy_update's gradient is that of
    -(1/n_traj) sum_traj (1/L_traj) sum_{rows of traj} q A  (one token per row, as the scoring policy stores)."""
    from ecpo_train.core.loss import trajectory_mean_weights

    traj = np.array([0, 1, 1, 1, 1, 2, 2])
    rows = len(traj)
    mask = torch.ones(rows, 1)
    old_logp = -torch.rand(rows, 1)
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5, -0.5, 0.0, 0.7])
    theta = torch.nn.Parameter(torch.zeros(rows, 1))
    grads = []

    class Capture(torch.optim.SGD):
        def step(self, closure=None):
            grads.append(theta.grad.clone())
            return super().step(closure)

    def logprob_fn(idx):
        idx = torch.as_tensor(idx)
        return old_logp[idx] + theta[idx], mask[idx], None

    weighted = adv * torch.as_tensor(trajectory_mean_weights(traj), dtype=adv.dtype)
    settings = UpdateSettings(mini_batch_size=rows, micro_batch_size=3, kl_coef=0.0, max_grad_norm=1e9)
    policy_update(logprob_fn, None, [theta], Capture([theta], lr=0.0), old_logp, mask, weighted, settings,
                  np.random.default_rng(0))
    lengths = np.bincount(traj)[traj]
    want = -(adv / torch.as_tensor(lengths, dtype=adv.dtype) / len(set(traj.tolist()))).unsqueeze(1)
    assert torch.allclose(grads[0], want, atol=1e-7)
