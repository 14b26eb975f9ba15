"""Training at scale on a tiny random Qwen2 (CPU): token-budget micro-batches, LoRA, gradient checkpointing, FSDP2.

Each test holds the scaled path to the plain one: a packed update has the unpacked update's gradient, the
LoRA reference is the base model, and checkpointing recomputes without changing gradients. FSDP2 (two gloo
processes end one update with the single process's loss and weights): ``test_scale_fsdp.py``.
"""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ENV_ID, lora_policy, make_policy

from ecpo_train.core.loss import UpdateSettings, policy_update
from ecpo_train.core.micro_batches import pack_micro_batches

# ---------------------------------------------------------------------------------------------- fixtures


def fixed_batch(policy, n_groups=4, group_size=2, seed=0):
    """Step rows of random token sequences (uneven lengths), old log-probs near the policy's, advantages."""
    rng = np.random.default_rng(seed)
    vocab = policy.model.config.vocab_size
    group_of_row, prompts, responses = [], [], []
    for group in range(n_groups):
        for _ in range(group_size):
            for _ in range(int(rng.integers(1, 4))):  # each trajectory: 1-3 steps
                group_of_row.append(group)
                prompts.append(rng.integers(0, vocab, size=int(rng.integers(4, 14))).tolist())
                responses.append(rng.integers(0, vocab, size=int(rng.integers(1, 7))).tolist())
    with torch.no_grad():
        logp, mask, _ = policy.logprobs(prompts, responses)
    noise = torch.as_tensor(rng.normal(0, 0.15, size=tuple(logp.shape)), dtype=torch.float32)
    return {
        "group": np.asarray(group_of_row), "prompts": prompts, "responses": responses,
        "old_logp": (logp + noise) * mask, "old_mask": mask.clone(),
        "advantages": torch.as_tensor(rng.normal(size=len(prompts)), dtype=torch.float32),
        "row_tokens": np.asarray([len(p) + len(r) for p, r in zip(prompts, responses)]),
    }


def run_update(policy, reference, batch, settings, *, rows=None, optimizer=None, reducer=None, capture=None):
    """``policy_update`` over ``rows`` of ``batch``; ``capture`` receives the gradients before the step."""
    rows = np.arange(len(batch["prompts"])) if rows is None else np.asarray(rows)
    prompts = [batch["prompts"][i] for i in rows]
    responses = [batch["responses"][i] for i in rows]

    def logprob_fn(idx):
        return policy.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])

    ref_fn = None
    if reference is not None:
        def ref_fn(idx):
            with torch.no_grad():
                return reference.logprobs([prompts[i] for i in idx], [responses[i] for i in idx])[0]

    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = optimizer or torch.optim.SGD(params, lr=0.0)

    def before_step():
        if capture is not None:
            capture.append({n: p.grad.detach().clone() for n, p in policy.named_parameters() if p.grad is not None})

    return policy_update(logprob_fn, ref_fn, params, optimizer, batch["old_logp"][rows], batch["old_mask"][rows],
                         batch["advantages"][rows], settings, np.random.default_rng(0), before_step=before_step,
                         row_tokens=batch["row_tokens"][rows], reducer=reducer)


def assert_same_grads(a, b, atol=1e-6):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=atol, rtol=1e-5), name


# ---------------------------------------------------------------------------------------------- token budget
def test_pack_micro_batches_bounds_padded_tokens_and_keeps_every_row():
    lengths = np.array([3, 9, 4, 12, 2, 7, 30, 5])
    rows = np.array([6, 0, 3, 5, 1, 7, 2])  # a mini-batch (row 4 is in another one)
    batches = pack_micro_batches(rows, lengths, micro_batch_size=2, max_tokens=20)
    assert sorted(np.concatenate(batches).tolist()) == sorted(rows.tolist())
    for micro in batches:
        assert len(micro) * lengths[micro].max() <= 20 or len(micro) == 1  # a 30-token row goes alone
    assert [len(b) for b in pack_micro_batches(rows, lengths, 3, max_tokens=0)] == [3, 3, 1]


def test_packed_update_has_the_unpacked_gradient(tiny_model_dir):
    torch.manual_seed(0)
    policy = make_policy(tiny_model_dir)
    reference = policy.frozen_copy()
    batch = fixed_batch(policy)
    grads = {}
    for label, settings in {
        "whole": UpdateSettings(mini_batch_size=10_000, micro_batch_size=10_000),
        "rows3": UpdateSettings(mini_batch_size=10_000, micro_batch_size=3),
        "tokens40": UpdateSettings(mini_batch_size=10_000, micro_batch_size=1, max_tokens_per_micro_batch=40),
    }.items():
        captured = []
        stats = run_update(policy, reference, batch, settings, capture=captured)
        grads[label] = (captured[0], stats)
    assert_same_grads(grads["whole"][0], grads["tokens40"][0])
    assert_same_grads(grads["whole"][0], grads["rows3"][0])
    for key in ("pg_loss", "kl", "clip_frac"):
        assert grads["tokens40"][1][key] == pytest.approx(grads["whole"][1][key], abs=1e-6)
    assert grads["whole"][1]["clip_frac"] > 0  # the noise made the ratio move: a non-trivial objective


# ---------------------------------------------------------------------------------------------- LoRA
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "up_proj"]}


def test_lora_step_moves_only_the_adapter_and_lowers_the_loss(tiny_model_dir):
    torch.manual_seed(0)
    policy = make_policy(tiny_model_dir, lora=LORA)
    reference = policy.frozen_copy()
    assert sum(p.numel() for p in reference.parameters()) == 0  # no second copy of the weights
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    batch = fixed_batch(policy)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    settings = UpdateSettings(mini_batch_size=10_000, micro_batch_size=4, kl_coef=0.01)
    losses = [run_update(policy, reference, batch, settings, optimizer=optimizer)["pg_loss"] for _ in range(4)]
    assert losses[-1] < losses[0]
    for name, param in policy.named_parameters():
        if name not in trainable:
            assert torch.equal(param.detach(), before[name]), name  # base weights never move
    assert any(not torch.equal(p.detach(), before[n]) for n, p in policy.named_parameters() if "lora_B" in n)


def test_lora_reference_is_the_base_model(tiny_model_dir):
    torch.manual_seed(0)
    policy = make_policy(tiny_model_dir, lora=LORA)
    base = make_policy(tiny_model_dir)
    batch = fixed_batch(policy)
    with torch.no_grad():  # a trained adapter: the policy now differs from the base ...
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
        trained = policy.logprobs(batch["prompts"], batch["responses"])[0]
        reference = policy.frozen_copy().logprobs(batch["prompts"], batch["responses"])[0]
        expected = base.logprobs(batch["prompts"], batch["responses"])[0]
        after = policy.logprobs(batch["prompts"], batch["responses"])[0]
    assert float((trained - expected).abs().max()) > 1e-3
    assert torch.allclose(reference, expected, atol=1e-5)  # ... but its reference is the base model
    assert torch.equal(after, trained)  # and the adapter is back on afterwards


def test_lora_checkpoint_merges_to_a_plain_model_that_plays(tiny_model_dir, tmp_path):
    from ecpo_train.policies.base import StepContext
    from ecpo_train.policies.lora import save_lora_checkpoint

    policy = lora_policy(tiny_model_dir, LORA)
    merged_dir = save_lora_checkpoint(policy, tiny_model_dir, tmp_path / "adapter", tmp_path / "merged")
    adapter_bytes = sum(f.stat().st_size for f in (tmp_path / "adapter").iterdir())
    merged_bytes = sum(f.stat().st_size for f in merged_dir.glob("*.safetensors"))
    assert adapter_bytes < merged_bytes / 10
    merged = make_policy(merged_dir)  # a plain transformers folder: no peft needed to load it
    assert merged.lora_model is None
    batch = fixed_batch(policy)
    with torch.no_grad():
        want = policy.logprobs(batch["prompts"], batch["responses"])[0]
        got = merged.logprobs(batch["prompts"], batch["responses"])[0]
    assert torch.allclose(got, want, atol=1e-4)
    ctx = StepContext(env_name=ENV_ID, task="reach the goal", step_count=0, history=[], observation="a room",
                      admissible_actions=["go red", "go blue"], state_key="s")
    out = merged.act([ctx, ctx], temperature=1.0)
    assert len(out.actions) == 2 and all(len(r) >= 1 for r in out.response_ids)


# ---------------------------------------------------------------------------------------------- checkpointing
def test_gradient_checkpointing_recomputes_and_keeps_the_gradient(tiny_model_dir):
    from ecpo_train.policies.scaling import enable_gradient_checkpointing

    torch.manual_seed(0)
    plain = make_policy(tiny_model_dir)
    batch = fixed_batch(plain)
    settings = UpdateSettings(mini_batch_size=10_000, micro_batch_size=5)
    want: list = []
    run_update(plain, None, batch, settings, capture=want)

    checkpointed = make_policy(tiny_model_dir)
    assert enable_gradient_checkpointing(checkpointed.model) == 2
    checkpointed.eval()  # the trainer scores in eval mode; checkpointing must still happen
    calls = []
    # a pre-hook: the recomputation stops inside the MLP once every saved tensor is back (early stop)
    checkpointed.model.model.layers[0].mlp.register_forward_pre_hook(lambda *a: calls.append(1))
    got: list = []
    run_update(checkpointed, None, batch, settings, capture=got)
    n_micro = len(pack_micro_batches(np.arange(len(batch["prompts"])), batch["row_tokens"], 5))
    assert len(calls) == 2 * n_micro  # forward, then recomputed in backward
    assert_same_grads(want[0], got[0])
    calls.clear()
    with torch.no_grad():  # sampling: no recomputation, the KV cache is kept
        checkpointed.sample([batch["prompts"][0]], temperature=0.0)
    assert len(calls) >= 1


def test_gradient_checkpointing_under_lora_recomputes_and_keeps_the_lora_gradient(tiny_model_dir):
    from ecpo_train.policies.scaling import apply_memory_settings

    torch.manual_seed(0)
    plain = make_policy(tiny_model_dir, lora=LORA)
    with torch.no_grad():  # B != 0, so lora_A has a gradient too
        for name, param in plain.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(1))
    batch = fixed_batch(plain)
    settings = UpdateSettings(mini_batch_size=10_000, micro_batch_size=5)
    want: list = []
    run_update(plain, plain.frozen_copy(), batch, settings, capture=want)

    checkpointed = make_policy(tiny_model_dir, lora=LORA)
    checkpointed.load_state_dict(plain.state_dict())
    apply_memory_settings(checkpointed.model, gradient_checkpointing=True, mixed_precision="none")
    checkpointed.eval()
    layers = checkpointed.model.model.layers  # the causal LM the policy holds, LoRA layers injected
    assert "lora_A" in dict(layers[0].self_attn.q_proj.named_modules())
    calls = {0: [], 1: []}  # per layer: was the forward recording gradients
    for i, layer in enumerate(layers):
        layer.mlp.register_forward_pre_hook(lambda *a, i=i: calls[i].append(torch.is_grad_enabled()))
    got: list = []
    run_update(checkpointed, checkpointed.frozen_copy(), batch, settings, capture=got)
    n_micro = len(pack_micro_batches(np.arange(len(batch["prompts"])), batch["row_tokens"], 5))
    # per micro-batch: the forward and its recomputation in backward (+ the reference: adapter off, no graph)
    assert sum(calls[0]) == sum(calls[1]) == 2 * n_micro
    assert len(calls[0]) - sum(calls[0]) >= 1
    assert want[0] and all("lora_" in name for name in want[0])
    assert_same_grads(want[0], got[0])


_ALLOCATOR_PROBE = r"""
import ctypes, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from ecpo_train.policies.scaling import enable_gradient_checkpointing

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks "
                "keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
torch.ones(24 * 2**20 // 4).sum()  # a 24 MiB block mmapped then freed: glibc's dynamic threshold rises to it
model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1))
enable_gradient_checkpointing(model)
mapped = libc.mallinfo2().hblkhd
activation = torch.ones(16 * 2**20 // 4)  # a 16 MiB activation
print(libc.mallinfo2().hblkhd - mapped)
"""


def test_gradient_checkpointing_on_cpu_lets_freed_activations_go_back_to_the_system():
    """glibc raises its mmap threshold when a big block is freed, so activations end up in a heap that small
    survivors (LoRA gradients) pin; checkpointing a CPU model fixes the threshold (scaling.py): a 16 MiB
    activation is mmapped again (unmapped when freed). In a fresh process: the heap has no free 16 MiB block."""
    import platform
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's allocator only")
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-c", _ALLOCATOR_PROBE], capture_output=True, text=True, env=env,
                          check=False, timeout=300)
    if "mallinfo2" in proc.stderr:
        pytest.skip("glibc < 2.33 has no mallinfo2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) >= 16 * 2**20


def test_gradient_checkpointing_of_the_ppo_critic(tiny_model_dir):
    from ecpo_train.policies.critic import LLMValueCritic
    from ecpo_train.policies.scaling import enable_gradient_checkpointing

    prompts = [[1, 2, 3, 4], [5, 6, 7]]
    grads = []
    for checkpoint in (False, True):
        critic = LLMValueCritic(str(tiny_model_dir), pad_token_id=0)
        torch.nn.init.normal_(critic.head.weight, std=0.1, generator=torch.Generator().manual_seed(0))
        if checkpoint:
            enable_gradient_checkpointing(critic.backbone)
        critic.values(prompts, ["a", "b"]).sum().backward()
        grads.append({n: p.grad.clone() for n, p in critic.named_parameters() if p.grad is not None})
    assert_same_grads(grads[0], grads[1])


def test_bf16_autocast_keeps_float32_master_weights(tiny_model_dir):
    from ecpo_train.policies.scaling import enable_autocast

    policy = make_policy(tiny_model_dir)
    enable_autocast(policy.model, "bf16")
    batch = fixed_batch(policy)
    seen = []
    policy.model.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    captured: list = []
    stats = run_update(policy, None, batch, UpdateSettings(mini_batch_size=10_000, micro_batch_size=8),
                       capture=captured)
    assert seen and set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    assert all(g.dtype == torch.float32 for g in captured[0].values())
    assert np.isfinite(stats["pg_loss"])


@pytest.mark.slow
def test_trainer_with_lora_checkpointing_and_token_budget_saves_a_playable_merged_model(tiny_model_dir, tmp_path):
    from ecpo_train.evaluation.agents import load_checkpoint_policy
    from ecpo_train.policies.base import StepContext
    from ecpo_train.runtime.config import make_config
    from ecpo_train.runtime.run import open_run
    from ecpo_train.runtime.run_dir import ADAPTER_DIR, MERGED_DIR
    from ecpo_train.runtime.trainer import Trainer

    config = make_config({
        "run_dir": str(tmp_path / "run"), "model": str(tiny_model_dir), "device": "cpu", "env_id": ENV_ID,
        "env_kwargs": {"depth": 2, "num_tasks": 2, "max_steps": 2}, "n_groups": 2, "group_size": 2,
        "max_prompt_length": 256, "max_response_length": 4, "iterations": 1, "val_every": 0, "lr": 1e-3,
        "tensorboard": False, "progress": False, "lora": LORA, "gradient_checkpointing": True,
        "max_tokens_per_micro_batch": 600, "micro_batch_size": 1,
    })
    with open_run(Trainer, config) as run:
        trainer = run.engine
        assert sum(p.numel() for p in trainer.reference.parameters()) == 0
        metrics = trainer.train_iteration()
        assert np.isfinite(metrics["update/pg_loss"]) and abs(metrics["update/kl"]) < 1e-6
        run.save()
    run = tmp_path / "run"
    assert (run / ADAPTER_DIR / "adapter_config.json").exists()
    merged = make_policy(run / MERGED_DIR)
    restored, _ = load_checkpoint_policy(run)
    prompts, responses = [[5, 6, 7, 8]], [[9, 10]]
    with torch.no_grad():
        want = trainer.policy.logprobs(prompts, responses)[0]
        assert torch.allclose(merged.logprobs(prompts, responses)[0], want, atol=1e-4)
        assert torch.allclose(restored.logprobs(prompts, responses)[0], want, atol=1e-5)
    ctx = StepContext(env_name=ENV_ID, task="reach the goal", step_count=0, history=[], observation="a room",
                      admissible_actions=["go red", "go blue"], state_key="s")
    assert len(merged.act([ctx]).actions) == 1
