"""The native trainer on the tabular policy: config overrides, learning, checkpoint -> exact resume, PPO."""

import json

import numpy as np
import pytest
import torch

from ecpo_gym.families import declared_max_steps
from ecpo_train.credit import CreditConfig, gae_targets, prepare_rows
from ecpo_train.runtime.config import load_config
from ecpo_train.runtime.run import open_run, train
from ecpo_train.runtime.trainer import Trainer

FAST = ["progress=false", "tensorboard=false", "val_every=0", "checkpoint_every=0"]


def quick(tmp_path, *extra):
    return load_config("quickstart", [f"run_dir={tmp_path}", *FAST, *extra])


def test_overrides_are_type_checked_and_unknown_keys_rejected(tmp_path):
    cfg = quick(tmp_path, "lr=0.25", "env_kwargs.depth=5", "estimator=gigpo_std")
    assert cfg.lr == 0.25 and cfg.env_kwargs["depth"] == 5 and cfg.env_kwargs["num_tasks"] == 4
    assert quick(tmp_path, "lr=1e-3").lr == 1e-3  # a number (YAML 1.2), though YAML 1.1 reads 1e-3 as a string
    with pytest.raises(ValueError, match="'lr' expects float"):
        quick(tmp_path, "lr=fast")
    with pytest.raises(ValueError, match="unknown config key 'learning_rate'"):
        quick(tmp_path, "learning_rate=1")
    with pytest.raises(ValueError, match="'n_groups' expects int"):
        quick(tmp_path, "n_groups=two")
    with pytest.raises(ValueError, match="estimator="):
        quick(tmp_path, "estimator=nope")
    with pytest.raises(ValueError, match="anchor_key"):
        quick(tmp_path, "anchor_key=room")


def test_presets_carry_the_paper_values():
    for name, steps, mini in (("alfworld", 50, 256), ("webshop", 15, 64), ("searchqa", 4, 512)):
        cfg = load_config(name, ["model=some/model"])
        assert (cfg.group_size, cfg.n_groups, cfg.lr, cfg.kl_coef, cfg.credit.gamma) == (8, 16, 1e-6, 0.01, 0.95)
        assert (cfg.credit.omega, cfg.credit.kappa, cfg.credit.tau, cfg.credit.d_min, cfg.credit.rho_min) == (1.0, 2.0, 2.0, 7, 0.5)
        # the step limit is the env's declared one (the constructor's default) unless the preset overrides it
        assert cfg.env_kwargs.get("max_steps", declared_max_steps(cfg.env_id)) == steps and cfg.mini_batch_size == mini
        assert (cfg.rollout_temperature, cfg.val_temperature) == (1.0, 0.4)


def test_checkpoint_resume_gives_the_same_next_iteration(tmp_path):
    with open_run(Trainer, quick(tmp_path / "a", "iterations=3")) as a:
        a.train(2)  # ends with its checkpoint
        expected = a.engine.train_iteration()

    with open_run(Trainer, quick(tmp_path / "a", "iterations=3"), resume=True) as b:
        assert b.engine.iteration == 2
        got = b.engine.train_iteration()
    timeless = lambda m: {k: v for k, v in m.items() if not k.startswith("time/")}
    assert timeless(got) == timeless(expected)


def test_resume_after_a_crash_replays_the_uninterrupted_run(tmp_path):
    """Checkpoint at iteration 2, one more iteration logged, then a crash: the resumed run drops the orphan
    log line and its metrics (validation included) equal an uninterrupted run's, each iteration logged once."""
    settings = ["iterations=4", "val_every=2", "val_episodes_per_task=2"]
    train(Trainer, quick(tmp_path / "whole", *settings))

    with open_run(Trainer, quick(tmp_path / "crashed", *settings)) as crashed:
        crashed.train(2)  # ends with a checkpoint at iteration 2
        crashed.log.append(crashed.engine.train_iteration(), step=3)  # iteration 3 logged, never checkpointed
    history = train(Trainer, quick(tmp_path / "crashed", *settings), resume=True)

    def logged(run):
        rows = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]

    assert [row["iteration"] for row in logged("crashed")] == [1, 2, 3, 4]
    assert logged("crashed") == logged("whole")
    assert [m["iteration"] for m in history] == [1, 2, 3, 4]
    assert "val/success" in logged("crashed")[3] and "val/success" not in logged("crashed")[2]
    episodes = lambda run: (tmp_path / run / "validation.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in episodes("crashed")] == [1, 2, 4]  # 3's was never checkpointed
    assert episodes("crashed") == episodes("whole")


def test_a_resume_keeps_the_log_through_its_checkpoint_once_and_again_after_a_write(tmp_path):
    """keep_through trims metrics.jsonl to the checkpoint's iteration; asked again with nothing written since (a
    native resume asks twice), it leaves the files alone; after an append it trims again."""
    from ecpo_train.runtime.run_dir import MetricsLog

    log = MetricsLog(tmp_path / "run", tensorboard=False)
    for k in (1, 2, 3):
        log.append({"iteration": k, "success": k / 4}, step=k)
    log.keep_through(2)
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert [json.loads(line)["iteration"] for line in metrics.read_text().splitlines()] == [1, 2]
    written = metrics.stat().st_mtime_ns
    log.keep_through(2)
    assert metrics.stat().st_mtime_ns == written  # not read or written again
    log.append({"iteration": 3, "success": 0.5}, step=3)
    log.keep_through(2)
    assert [json.loads(line)["iteration"] for line in metrics.read_text().splitlines()] == [1, 2]
    assert [row["iteration"] for row in log.history] == [1, 2]


def test_validation_is_reproducible_and_its_episodes_pair_up(tmp_path):
    """Validation fixes each choice's draw by (seed, copy, step): the same weights validate to the same episodes
    however far training moved the random streams, and ``validation.jsonl`` records them in order, copies
    numbered within their task, so two checkpoints' validations pair episode by episode."""
    from ecpo_train.core.tasks import validation_seed

    run = open_run(Trainer, quick(tmp_path, "iterations=1", "val_every=1", "val_episodes_per_task=3",
                                  "val_before_training=true"))
    trainer, seed = run.engine, validation_seed(run.config.seed)
    first = trainer.validate(trainer.val_tasks, seed)
    torch.manual_seed(123)
    trainer.rng.random(17)  # the training streams move on
    torch.rand(5)
    assert trainer.validate(trainer.val_tasks, seed) == first
    with run:
        run.train()
    first = first[0]
    lines = [json.loads(line) for line in (tmp_path / "validation.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [0, 1]  # a fresh run's log starts with its own validations
    tasks = trainer.val_tasks
    for line in lines:
        assert line["task_ids"] == [t for t in tasks for _ in range(3)]
        assert line["copies"] == [0, 1, 2] * len(tasks)
    assert np.mean(lines[0]["won"]) == pytest.approx(first["val/success"])  # before training: the same episodes
    assert np.mean(lines[1]["won"]) == pytest.approx(run.history[-1]["val/success"])


def test_validating_another_task_set_keeps_the_validation_log_paired(tmp_path):
    """``validate(tasks, label)``: another task set validated exactly as the configured one (the same tasks give
    the same episodes), recorded in ``validation.jsonl`` under its label, so the configured set's lines still pair
    first (before training) to last, and a resume keeps every set's lines through its checkpoint."""
    from ecpo_train.runtime.run_dir import read_validation_file

    run = open_run(Trainer, quick(tmp_path, "iterations=1", "val_every=1", "val_episodes_per_task=2",
                                  "val_num_tasks=2", "val_before_training=true"))
    trainer = run.engine
    run.train()  # validations at iterations 0 and 1
    configured = list(trainer.val_tasks)
    after = run.validate()
    assert run.validate(configured, "again") == after  # the same seed, temperature and draws
    on_training = run.validate(trainer.train_tasks, "training_tasks")
    assert trainer.val_tasks == configured  # the configured set is untouched
    assert run.validate() == after
    kept_envs = trainer.val_envs
    run.validate(list(reversed(configured)), "reversed")
    assert trainer.val_envs is kept_envs  # as many tasks: the validation envs are reused
    path = tmp_path / "validation.jsonl"
    assert [line["iteration"] for line in read_validation_file(path)] == [0, 1, 1, 1]  # the configured set only
    assert all("tasks" not in line for line in read_validation_file(path))
    (line,) = read_validation_file(path, tasks="training_tasks")
    assert (line["iteration"], line["tasks"]) == (1, "training_tasks")
    assert line["task_ids"] == [t for t in trainer.train_tasks for _ in range(2)]
    assert np.mean(line["won"]) == pytest.approx(on_training["val/success"])
    assert [again["won"] for again in read_validation_file(path, tasks="again")] == [read_validation_file(path)[-1]["won"]]
    run.log.keep_through(1)  # what a resume from iteration 1 keeps: every set's lines through it
    assert [(line["iteration"], line.get("tasks")) for line in read_validation_file(path, tasks=None)] == [
        (0, None), (1, None), (1, None), (1, "again"), (1, "training_tasks"), (1, None), (1, "reversed")]
    for bad in ({"tasks": configured}, {"label": "training_tasks"}, {"tasks": configured, "label": "validation"}):
        with pytest.raises(ValueError, match="label"):
            run.validate(**bad)
    run.close()


def test_a_run_over_a_used_run_directory_starts_a_fresh_log(tmp_path):
    train(Trainer, quick(tmp_path, "iterations=2"))
    with pytest.raises(ValueError, match="--overwrite"):  # a plain start never erases a run
        open_run(Trainer, quick(tmp_path, "iterations=1"))
    train(Trainer, quick(tmp_path, "iterations=1"), overwrite=True)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1]
    assert not (tmp_path / "validation.jsonl").exists()  # val_every=0: no validation, no episode log


@pytest.mark.parametrize("estimator", ["ecpo", "gigpo_std"])
def test_quickstart_training_raises_exact_validation_success(tmp_path, estimator):
    """The quick-start preset, fixed seed 0, 30 iterations: the exact (DP) validation success at T=0.4 climbs
    from the uniform policy's ~0.03 after iteration 1 to >= 0.5 (the best policy reaches 0.78), the same
    hyperparameters for both methods; train-rollout success rises by >= 0.3 (first 5 vs last 5 iterations)."""
    history = train(Trainer, quick(tmp_path, f"estimator={estimator}", "iterations=30", "seed=0", "val_every=30",
                                   "val_episodes_per_task=4"))
    validated = [m for m in history if "val/exact_success" in m]
    assert [int(m["iteration"]) for m in validated] == [1, 30]
    first, last = validated[0]["val/exact_success"], validated[-1]["val/exact_success"]
    assert first < 0.1 and last >= 0.5 and last >= first + 0.4, (first, last)
    success = [m["success"] for m in history]
    assert np.mean(success[-5:]) >= np.mean(success[:5]) + 0.3, success
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 30 and "val/exact_success" in json.loads(lines[-1])
    if estimator == "ecpo":
        assert "credit/mean_rho" in json.loads(lines[-1])


def test_exact_validation_matches_the_uniform_policy_by_hand(tmp_path):
    """An untrained (uniform) tabular policy: exact success = prod over rooms of the mean door probability."""
    from ecpo_gym.diagnostic import DivergentAnchorEnv
    from ecpo_train.policies.tabular import TabularSoftmaxPolicy
    from ecpo_train.runtime.builders import exact_success

    kwargs = {"num_tasks": 2, "depth": 3, "rare_prob": [0.3, 0.6]}
    env = DivergentAnchorEnv(**kwargs)
    by_hand = np.mean([np.prod([np.mean(p) for p in env.layout(t).advance_prob]) for t in env.task_ids])
    got = exact_success(TabularSoftmaxPolicy(), "ecpo/DivergentAnchor-v0", kwargs, list(env.task_ids), 0.4)
    assert got == pytest.approx(by_hand, rel=1e-9)
    assert exact_success(TabularSoftmaxPolicy(), "ecpo/WebShopGen-v0", {}, ["goal_0"], 0.4) is None


def gae_advantages(traj_ids, steps, rewards, values, gamma, lam):
    """eq. gae as the ppo estimator computes it: ``(advantages, value targets)`` per row."""
    zeros = np.zeros(len(rewards), dtype=np.int64)
    rows = prepare_rows(zeros, traj_ids, steps, zeros, zeros, rewards)
    return gae_targets(rows, values, CreditConfig(gamma=gamma), lam)


def test_gae_matches_hand_computation():
    # one trajectory of 3 steps, rewards 0, 0, 10; values 1, 2, 3; gamma 0.5, lambda 1
    adv, targets = gae_advantages(np.array([0, 0, 0]), np.array([1, 2, 3]), np.array([0.0, 0.0, 10.0]),
                                  np.array([1.0, 2.0, 3.0]), gamma=0.5, lam=1.0)
    # lambda = 1: A_t = discounted return - V(s_t): returns 2.5, 5, 10
    assert np.allclose(adv, [1.5, 3.0, 7.0]) and np.allclose(targets, [2.5, 5.0, 10.0])
    adv0, _ = gae_advantages(np.array([0, 0]), np.array([2, 1]), np.array([1.0, 0.0]), np.array([0.0, 4.0]),
                             gamma=1.0, lam=0.0)
    # lambda = 0: one-step TD errors, rows in any order
    assert np.allclose(adv0, [1.0, -4.0])


def test_tabular_critic_fits_value_targets():
    import torch

    from ecpo_train.policies.critic import TabularCritic, critic_update

    critic = TabularCritic(initial_capacity=2)  # grows past its capacity on the third key
    optimizer = torch.optim.AdamW(critic.parameters(), lr=0.3, weight_decay=0.0)
    keys = ["a", "b", "c", "a", "b", "c"]
    targets = np.array([1.0, -2.0, 5.0, 3.0, -2.0, 5.0])  # V*(a) = 2 (mean), V*(b) = -2, V*(c) = 5
    for _ in range(200):
        stats = critic_update(critic, optimizer, [[]] * 6, keys, targets, mini_batch_size=6, micro_batch_size=4,
                              max_grad_norm=100.0, generator=np.random.default_rng(0))
    with torch.no_grad():
        values = critic.values([[]] * 3, ["a", "b", "c"]).numpy()
    assert np.allclose(values, [2.0, -2.0, 5.0], atol=0.05)
    assert stats["value_loss"] == pytest.approx(0.5 * 2 / 6, abs=0.02)  # only a's spread (+-1) remains


def test_ppo_with_tabular_critic_trains(tmp_path):
    with open_run(Trainer, quick(tmp_path, "estimator=ppo", "iterations=4", "critic_lr=0.5")) as run:
        history = run.train()
    trainer = run.engine
    assert all(np.isfinite(m["credit/value_loss"]) and np.isfinite(m["update/pg_loss"]) for m in history)
    assert len(trainer.critic.index) > 0 and history[-1]["credit/value_mean"] != 0.0


def test_an_iteration_factorises_the_keys_once(tmp_path, monkeypatch):
    from ecpo_train.core import rows as credit

    calls = []
    real = credit.factorize_keys
    monkeypatch.setattr(credit, "factorize_keys", lambda keys, name="keys": calls.append(name) or real(keys, name))
    with open_run(Trainer, quick(tmp_path, "iterations=1", "n_groups=2")) as run:
        calls.clear()
        run.engine.train_iteration()
    # one TrajectoryBatch built by the rollout, coded once; the credit step reuses its codes
    assert sorted(calls) == ["action_keys", "anchor_keys", "group_ids", "traj_ids"]


def test_validation_does_not_change_the_training_run(tmp_path):
    """Validating samples from the same random streams as training; the trainer puts them back, so a run's
    training metrics do not depend on how often it validates. (States first seen in validation get their
    tabular slots earlier, which only reorders the float sum of the gradient norm: hence approx.)"""
    def training_metrics(folder, val_every):
        history = train(Trainer, quick(folder, "iterations=4", "n_groups=4", "group_size=4", f"val_every={val_every}"))
        return [{k: v for k, v in m.items() if not k.startswith(("time/", "val/"))} for m in history]

    never, every = training_metrics(tmp_path / "never", 0), training_metrics(tmp_path / "every", 1)
    assert every == [pytest.approx(m, rel=1e-6) for m in never]
    assert [m["success"] for m in every] == [m["success"] for m in never]


def test_validation_schedule_and_skipping_the_first_iteration(tmp_path):
    """val_every=3 over 4 iterations validates after 1, 3 and 4; val_after_first=false drops 1 (a short run
    that only needs before and after pays for one validation less)."""
    def validated(*extra):
        cfg = quick(tmp_path / "_".join(extra or ("default",)), "iterations=4", "val_every=3", *extra)
        history = train(Trainer, cfg)
        assert [i for i in range(1, 5) if cfg.validates_after(i)] == [m["iteration"] for m in history
                                                                      if "val/success" in m]
        return [m["iteration"] for m in history if "val/success" in m]

    assert validated() == [1, 3, 4]
    assert validated("val_after_first=false") == [3, 4]
    assert not load_config("quickstart", ["val_every=0"]).validates_after(1)


def test_lr_warmup_rises_linearly_over_the_optimizers_first_steps(tmp_path):
    """lr_warmup_steps=3: the optimizer's steps run at lr/3, 2lr/3, lr, lr, ... (AdamW's first steps, whose
    moments are new, would otherwise move every weight by about lr)."""
    run = open_run(Trainer, quick(tmp_path, "iterations=3", "lr=0.3", "lr_warmup_steps=3", "mini_batch_size=16"))
    trainer = run.engine
    used, step = [], trainer.optimizer.step

    def recording_step(*args, **kwargs):
        used.append(trainer.optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    trainer.optimizer.step = recording_step
    with run:
        run.train()
    assert len(used) >= 4
    assert used[:4] == pytest.approx([0.1, 0.2, 0.3, 0.3]) and set(used[3:]) == {0.3}


@pytest.mark.parametrize("estimator", ["pgpo", "hgpo", "graphgpo", "pace"])
def test_the_other_papers_estimators_train_natively(tmp_path, estimator):
    """Issue 57's estimators run in the native trainer by name, their hyperparameters from ``credit``, their
    diagnostics in the metrics."""
    own_key = {"pgpo": "credit.pgpo_alpha=1.0", "hgpo": "credit.hgpo_alpha=2.0",  # (another's is refused)
               "graphgpo": "credit.graph_success_return=5.0", "pace": "credit.pace_cosine=0.9"}[estimator]
    history = train(Trainer, quick(tmp_path, f"estimator={estimator}", "iterations=3", own_key))
    assert len(history) == 3 and all(np.isfinite(m["credit/advantage_std"]) for m in history)
    own = {"pgpo": "credit/pgpo_mean_weight", "hgpo": "credit/hgpo_no_group_fraction",
           "graphgpo": "credit/graph_success_group_fraction", "pace": "credit/pace_states"}[estimator]
    assert own in history[-1]


def _same_batch(a, b):
    for name in (*a.column_names(), "old_logprobs"):
        assert np.array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name))), name
    assert [list(map(list, x)) for x in (a.prompt_ids, a.response_ids)] == \
        [list(map(list, x)) for x in (b.prompt_ids, b.response_ids)]


def _same_state(got, want):
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            _same_state(got[key], want[key])
    elif isinstance(want, torch.Tensor):
        assert torch.equal(got, want)
    else:
        assert got == want


def test_sample_and_update_from_outside_the_loop_are_the_iterations_own_steps(tmp_path):
    """``Trainer.sample`` of the iteration's draw is the iteration's batch, and ``Trainer.update_policy`` with
    its credit and shuffle leaves the policy exactly where the iteration leaves it (what a study's one-update
    measurement relies on); neither moves the iteration count."""
    from ecpo_train.core.iteration import credit_step, draw_iteration, shuffle_generator, update_plan

    cfg = quick(tmp_path, "iterations=1", "estimator=ecpo")
    seen = []
    a = Trainer(cfg)
    a.train_iteration(observe=lambda sampled, learned: seen.append(sampled.played.batch))
    b = Trainer(cfg)
    try:
        tasks, env_seed = draw_iteration(cfg, b.train_tasks, b.rng, 0)
        rollout = b.sample(tasks, env_seed)
        _same_batch(rollout.batch, seen[0])
        assert len(rollout.episodes) == cfg.n_groups * cfg.group_size
        plan = update_plan(cfg, b.rng, [rollout.batch], 1)
        advantages, _ = credit_step(cfg, plan.tables[0])
        assert np.any(np.asarray(advantages) != 0)  # (the update moves the policy)
        b.update_policy(plan.tables[0], advantages, shuffle_generator(plan.shuffle))
        assert b.iteration == 0
        _same_state(b.policy.state_dict(), a.policy.state_dict())
    finally:
        a.close()
        b.close()


def test_act_with_plays_the_iterations_with_another_actor_and_none_restores_the_policy(tmp_path):
    class Counting:  # acts as the policy does, counting its calls
        def __init__(self, policy):
            self.policy, self.calls = policy, 0

        def __getattr__(self, name):
            if name == "policy":
                raise AttributeError(name)
            return getattr(self.policy, name)

        def act(self, contexts, temperature=1.0):
            self.calls += 1
            return self.policy.act(contexts, temperature=temperature)

    cfg = quick(tmp_path, "iterations=2")
    plain, wrapped = Trainer(cfg), Trainer(cfg)
    try:
        wrapped.act_with(actor := Counting(wrapped.policy))
        timeless = lambda m: {k: v for k, v in m.items() if not k.startswith("time/")}
        assert timeless(wrapped.train_iteration()) == timeless(plain.train_iteration())
        played = actor.calls
        assert played > 0
        wrapped.act_with(None)
        wrapped.train_iteration()
        assert actor.calls == played
    finally:
        plain.close()
        wrapped.close()


def test_optimizer_step_takes_its_lr_for_that_step_only_and_moments_can_be_cleared(tmp_path):
    """A step at ``lr`` is the step of a trainer whose learning rate is ``lr``; the trainer's own rate is kept for
    the next step; ``clear_optimizer_moments`` leaves no AdamW state in the checkpoint."""
    def loss_of(trainer):
        rollout = trainer.sample([trainer.train_tasks[0]] * trainer.config.n_groups, 7)
        rows = rollout.batch
        logp, mask, _ = trainer.policy.logprobs(list(rows.prompt_ids), list(rows.response_ids))
        return -(logp * mask).sum()  # (a push toward the sampled actions)

    fast, slow = Trainer(quick(tmp_path / "f", "lr=0.25")), Trainer(quick(tmp_path / "s", "lr=0.05"))
    try:
        fast.optimizer_step(loss_of(fast), lr=0.05)
        slow.optimizer_step(loss_of(slow))
        _same_state(fast.policy.state_dict(), slow.policy.state_dict())
        assert [g["lr"] for g in fast.checkpoint_state()["optimizer"]["param_groups"]] == [0.25]
        assert fast.checkpoint_state()["optimizer"]["state"]
        fast.clear_optimizer_moments()
        assert fast.checkpoint_state()["optimizer"]["state"] == {}
    finally:
        fast.close()
        slow.close()


def test_a_sampling_seed_fixes_the_batch_whatever_was_sampled_before(tmp_path):
    trainer = Trainer(quick(tmp_path, "rollout_temperature=2.0"))
    try:
        tasks = [trainer.train_tasks[0]] * trainer.config.n_groups
        first = trainer.sample(tasks, 3, sampling_seed=11).batch
        unseeded = trainer.sample(tasks, 3).batch  # the policy's stream has moved on: another batch
        assert list(unseeded.action_key) != list(first.action_key)
        _same_batch(trainer.sample(tasks, 3, sampling_seed=11).batch, first)
    finally:
        trainer.close()
