"""eq. ecpo_objective against hand-computed values: clipping on both sides, masking, k3 KL, accumulation."""

import math

import numpy as np
import pytest
import torch

from ecpo_train.core.loss import UpdateSettings, policy_update
from ecpo_train.core.objective import (
    assign_step_advantage,
    clipped_surrogate,
    decoupled_clipped_surrogate,
    ecpo_objective_loss,
    kl_k3,
    masked_token_mean,
    truncated_is_weight,
)


def _per_token_table(base, mask, lr=0.0):
    """A parameter table theta with log pi_theta = base + theta per token, and an SGD that records each step's
    gradient: (theta, logprob_fn, optimizer, grads)."""
    theta = torch.nn.Parameter(torch.zeros_like(base))
    grads = []

    class Capture(torch.optim.SGD):
        def step(self, closure=None):
            grads.append(theta.grad.clone())
            return super().step(closure)

    def logprob_fn(idx):
        idx = torch.as_tensor(idx)
        return base[idx] + theta[idx], mask[idx], None

    return theta, logprob_fn, Capture([theta], lr=lr), grads


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
        theta, logprob_fn, opt, grads = _per_token_table(old_logp, mask)
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
    theta, logprob_fn, opt, grads = _per_token_table(old_logp, mask)

    weighted = adv * torch.as_tensor(trajectory_mean_weights(traj), dtype=adv.dtype)
    settings = UpdateSettings(mini_batch_size=rows, micro_batch_size=3, kl_coef=0.0, max_grad_norm=1e9)
    policy_update(logprob_fn, None, [theta], opt, old_logp, mask, weighted, settings,
                  np.random.default_rng(0))
    lengths = np.bincount(traj)[traj]
    want = -(adv / torch.as_tensor(lengths, dtype=adv.dtype) / len(set(traj.tolist()))).unsqueeze(1)
    assert torch.allclose(grads[0], want, atol=1e-7)


# ---------------------------------------------------------------------------------------------- lagged behaviour
def _probs(values):
    return torch.log(torch.tensor(values, dtype=torch.float64))


def test_truncated_is_correction_on_a_hand_built_case():
    """loss = -mean_t w_t min(r_t A_t, clip(r_t, 0.8, 1.2) A_t), r = pi_theta / pi_prox, w = min(pi_prox / mu, 2)."""
    mu = _probs([0.5, 0.1, 0.4, 0.2, 0.25, 0.9])
    prox = _probs([0.5, 0.4, 0.2, 0.3, 0.2, 0.1])
    theta = _probs([0.55, 0.4, 0.3, 0.15, 0.3, 0.9]).requires_grad_()
    adv = torch.tensor([1.0, 1.0, 2.0, -1.0, -1.0, 5.0], dtype=torch.float64)
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64)  # the last token is padding
    # by hand, token by token:
    #   w = 1,        r = 1.1: min(1.1, 1.1)       ->  1.1
    #   w = 4 -> 2,   r = 1:   min(1, 1)           ->  2 * 1   =  2.0   (truncated weight)
    #   w = 0.5,      r = 1.5: min(3.0, 1.2 * 2)   ->  0.5 * 2.4 = 1.2   (clipped ratio, A > 0)
    #   w = 1.5,      r = 0.5: min(-0.5, -0.8)     ->  1.5 * -0.8 = -1.2 (clipped ratio, A < 0)
    #   w = 0.8,      r = 1.5: min(-1.5, -1.2)     ->  0.8 * -1.5 = -1.2 (not clipped: the pessimistic side)
    want = [1.1, 2.0, 1.2, -1.2, -1.2]
    surrogate = decoupled_clipped_surrogate(theta, prox, mu, adv, clip_eps=0.2, cap=2.0)
    assert surrogate[:5].tolist() == pytest.approx(want, abs=1e-12)
    loss, stats = ecpo_objective_loss(theta, mu, None, adv, mask, clip_eps=0.2, prox_logp=prox, is_weight_cap=2.0)
    assert float(loss.detach()) == pytest.approx(-sum(want) / 5, abs=1e-12)
    assert stats["is_weight_mean"] == pytest.approx((1 + 2 + 0.5 + 1.5 + 0.8) / 5)
    assert stats["is_weight_capped_frac"] == pytest.approx(1 / 5)
    assert stats["clip_frac"] == pytest.approx(2 / 5)  # tokens 3 and 4, against pi_prox
    loss.backward()
    # d loss / d log pi_theta = -w r A / 5 where the min takes the unclipped term, 0 where it takes the clipped one
    assert theta.grad.tolist() == pytest.approx([-1.1 / 5, -2.0 / 5, 0.0, 0.0, -0.8 * 1.5 * -1 / 5, 0.0], abs=1e-12)
    assert not truncated_is_weight(prox.clone().requires_grad_(), mu, 2.0).requires_grad  # w is a constant


def test_no_correction_is_the_paper_objective_and_a_proximal_policy_equal_to_mu_changes_nothing():
    torch.manual_seed(3)
    mu, adv = -torch.rand(4, 5), torch.randn(4, 5)
    mask = (torch.rand(4, 5) > 0.3).float()
    for correction in (None, mu.clone()):
        logp = (mu + 0.3 * torch.randn(4, 5)).requires_grad_()
        plain, _ = ecpo_objective_loss(logp, mu, None, adv, mask, clip_eps=0.2)
        # "none": exactly eq. ecpo_objective's token mean of clipped_surrogate against the sampling log-probs
        assert torch.equal(plain, -masked_token_mean(clipped_surrogate(logp, mu, adv, 0.2), mask))
        if correction is not None:  # pi_prox == mu: w = 1 and r = pi_theta / mu, bit for bit
            corrected, _ = ecpo_objective_loss(logp, mu, None, adv, mask, clip_eps=0.2, prox_logp=correction)
            assert torch.equal(corrected, plain)
            (grad_plain,) = torch.autograd.grad(plain, logp)
            (grad_corrected,) = torch.autograd.grad(corrected, logp)
            assert torch.equal(grad_plain, grad_corrected)


def _update(correction: str, behaviour_shift: float, epochs: int = 2):
    """policy_update on a per-token parameter table theta (log pi_theta = base + theta); the rows' sampling
    log-probs are base - behaviour_shift (a behaviour policy behind the weights the update starts from)."""
    torch.manual_seed(0)
    rows, width = 6, 2
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]] * 3)
    base = -torch.rand(rows, width) * mask
    adv = torch.tensor([1.0, -0.5, 2.0, 0.0, -1.0, 0.7])
    theta, logprob_fn, opt, grads = _per_token_table(base, mask, lr=0.5)

    settings = UpdateSettings(mini_batch_size=3, micro_batch_size=2, kl_coef=0.0, max_grad_norm=1e9, num_epochs=epochs,
                              behaviour_correction=correction, is_weight_cap=1.5)
    stats = policy_update(logprob_fn, None, [theta], opt, base - behaviour_shift * mask, mask,
                          adv, settings, np.random.default_rng(0))
    return theta.detach(), grads, stats, base, mask, adv


def test_the_corrected_update_with_mu_as_proximal_policy_equals_the_plain_one():
    theta_plain, grads_plain, stats_plain, *_ = _update("none", 0.0)
    theta_is, grads_is, stats_is, *_ = _update("truncated_is", 0.0)
    assert len(grads_plain) == 4  # two epochs of two mini-batches: the weights move between them
    assert torch.equal(theta_plain, theta_is)
    assert all(torch.equal(a, b) for a, b in zip(grads_plain, grads_is))
    assert stats_is["is_weight_mean"] == pytest.approx(1.0) and stats_is["is_weight_capped_frac"] == 0.0
    assert {k: stats_plain[k] for k in stats_plain} == {k: stats_is[k] for k in stats_plain}


def test_the_proximal_policy_is_the_weights_the_update_starts_from():
    """Rows sampled with log-probs 0.5 below the current weights': the first step's ratio is 1 (pi_prox = the
    current weights), and every token's weight is min(e^0.5, 1.5) = 1.5 (truncated), so the first mini-batch's
    gradient is -1.5 A / n_tokens on its tokens."""
    _, grads, stats, _, mask, adv = _update("truncated_is", 0.5, epochs=1)
    order = np.random.default_rng(0).permutation(6)[:3]  # the first mini-batch, as policy_update shuffles
    want = torch.zeros(6, 2)
    want[order] = -1.5 * adv[order].unsqueeze(1) * mask[order] / mask[order].sum()
    assert torch.allclose(grads[0], want, atol=1e-7)
    assert stats["is_weight_capped_frac"] == pytest.approx(1.0)
    _, grads_plain, *_ = _update("none", 0.5, epochs=1)
    assert not torch.allclose(grads_plain[0], want, atol=1e-3)  # without it: the ratio e^0.5 to mu, clipped


def test_behaviour_correction_settings_are_checked_and_reach_the_update():
    from ecpo_train.runtime.builders import update_settings
    from ecpo_train.runtime.config import TrainConfig

    config = TrainConfig(policy="tabular", behaviour_correction="truncated_is", is_weight_cap=3.0)
    assert (update_settings(config).behaviour_correction, update_settings(config).is_weight_cap) == ("truncated_is", 3.0)
    assert TrainConfig(policy="tabular").behaviour_correction == UpdateSettings().behaviour_correction == "none"
    with pytest.raises(ValueError, match=r"^behaviour_correction='is'; valid: none, truncated_is$"):
        TrainConfig(policy="tabular", behaviour_correction="is")
    with pytest.raises(ValueError, match=r"^is_weight_cap=0.5 is invalid: it must be a number in \[1, "):
        TrainConfig(policy="tabular", is_weight_cap=0.5)
    with pytest.raises(ValueError, match="behaviour_correction='x'"):
        policy_update(lambda rows: None, None, [], None, torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1),
                      UpdateSettings(behaviour_correction="x"), np.random.default_rng(0))
