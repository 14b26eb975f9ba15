"""The classic-RL example in RLlib (local Ray, CPU): training, group integrity, exact credit, learning,
checkpoints. One Ray session serves the whole module."""


import numpy as np
import pytest

ray = pytest.importorskip("ray")

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing

from ecpo_train import credit
from examples.rllib_candidate.config import CandidateECPO, CandidateECPOConfig, split_groups
from examples.rllib_candidate.env import CandidateActionEnv

N = 4
SMALL_ENV = {"env_kwargs": {"depth": 4, "num_tasks": 2}, "max_candidates": 4, "feature_dim": 16, "seed": 0}


@pytest.fixture(scope="module", autouse=True)
def _ray():
    """Every test here runs in the module's local Ray session (2 CPUs, quiet)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def small_config(**training):
    params = {"group_size": N, "groups_per_batch": 2, "credit": {"d_min": 1}, "num_epochs": 2, **training}
    return (CandidateECPOConfig()
            .environment("ecpo/DivergentAnchor-v0", env_config=dict(SMALL_ENV))
            .training(**params)
            .debugging(seed=0))


def module_weights(algo):
    return {k: np.array(v, copy=True) for k, v in algo.learner_group.get_weights()["default_policy"].items()}


def on_learners(algo, func):
    """``func(learner)`` on every learner, local or remote; the list of results."""
    results = algo.learner_group.foreach_learner(func)
    return [r.get() if hasattr(r, "get") else r for r in results]


def weights_differ(a, b):
    return any(not np.array_equal(a[k], b[k]) for k in a)


def test_the_config_wraps_text_env_ids_with_group_size_in_sync():
    config = (CandidateECPOConfig().environment("ecpo/DivergentAnchor-v0").training(group_size=6, credit={"kappa": 3.0})
              .environment(env_config={"max_candidates": 5}))
    assert config.algo_class is CandidateECPO and config.env is CandidateActionEnv
    assert config.env_config == {"env_id": "ecpo/DivergentAnchor-v0", "group_size": 6, "max_candidates": 5}
    assert config.credit == credit.CreditConfig(kappa=3.0)
    assert config.use_critic is False and config.batch_mode == "complete_episodes"
    with pytest.raises(ValueError, match="num_learners"):
        config.copy().training(groups_per_batch=1).learners(num_learners=2).validate()
    # the one group-size rule (credit.check_group_size), word for word as the native config says it
    with pytest.raises(ValueError, match=r"group_size=1 is invalid: group-relative credit \(ecpo\) needs >= 2"):
        config.copy().training(group_size=1).validate()


@pytest.mark.parametrize("num_env_runners", [0, 1])
def test_three_iterations_train_on_complete_groups(num_env_runners):
    algo = small_config().env_runners(num_env_runners=num_env_runners).build_algo()
    try:
        before = module_weights(algo)
        for _ in range(3):
            result = algo.train()
            ecpo = result["learners"]["ecpo"]
            assert ecpo["batch_groups"] == 2
            assert ecpo["batch_group_size_min"] == ecpo["batch_group_size_max"] == N
            assert 0.0 <= result["ecpo_sampling"]["success_rate"] <= 1.0
            assert np.isfinite(result["learners"]["default_policy"]["total_loss"])
        assert weights_differ(before, module_weights(algo))
        # the episodes came from the runner that should have sampled them (worker 0 = local)
        sample = (algo.env_runner_group.foreach_env_runner(lambda r: r.sample(num_episodes=N),
                                                           local_env_runner=False)[0]
                  if num_env_runners else algo.env_runner.sample(num_episodes=N))
        assert {e.get_infos(0)["group_key"][:2] for e in sample} == {f"w{num_env_runners}"}
        assert len(split_groups(sample, N)) == 1
    finally:
        algo.stop()


def test_two_learners_receive_whole_groups():
    algo = small_config(groups_per_batch=3).learners(num_learners=2).build_algo()
    try:
        for _ in range(2):
            ecpo = algo.train()["learners"]["ecpo"]
            # summed over the two learners; min/max over every group either learner saw
            assert ecpo["batch_groups"] == 3
            assert ecpo["batch_group_size_min"] == ecpo["batch_group_size_max"] == N
        weights = on_learners(algo, lambda learner: (
            learner.module["default_policy"].unwrapped().scorer[2].bias.detach().numpy().copy()))
        assert len(weights) == 2 and np.array_equal(weights[0], weights[1])  # DDP kept them in sync
    finally:
        algo.stop()


def _credit_rows(episodes):
    """The credit contract read straight off the episodes: reset info first, one info per step."""
    cols = {k: [] for k in ("group", "traj", "step", "state", "action", "reward")}
    for traj, episode in enumerate(episodes):
        infos, rewards = episode.get_infos(), episode.get_rewards()
        for t in range(len(episode)):
            cols["group"].append(infos[0]["group_key"])
            cols["traj"].append(traj)
            cols["step"].append(t + 1)
            cols["state"].append(infos[t]["state_key"])
            cols["action"].append(infos[t + 1]["action_key"])
            cols["reward"].append(rewards[t])
    return cols


@pytest.mark.parametrize("estimator", ["ecpo", "gigpo", "pgpo", "hgpo", "graphgpo", "pace"])
def test_train_batch_advantages_equal_credit_on_the_same_episodes(estimator):
    algo = small_config(estimator=estimator, groups_per_batch=3).build_algo()
    try:
        episodes = algo.env_runner.sample(num_episodes=3 * N)
        config = algo.config
        def run_connector(episode_list):
            return on_learners(algo, lambda learner: learner._learner_connector(
                rl_module=learner.module, batch={}, episodes=episode_list, shared_data={}, metrics=None))[0]

        learner_batch = run_connector(episodes)["default_policy"]
        got = learner_batch[Postprocessing.ADVANTAGES].numpy()
        rows = _credit_rows(episodes)
        columns = (rows["group"], rows["traj"], rows["step"], rows["state"], rows["action"], rows["reward"])
        expected, _ = credit.compute_advantages(estimator, dict(zip(credit.STEP_COLUMNS, columns)), config.credit)
        assert got.shape == (len(rows["step"]),)
        np.testing.assert_array_equal(got, np.asarray(expected, dtype=np.float32))
        # each advantage sits on its own step's row: the batch's observations are the episodes' pre-step
        # observations in the same order, and the value targets are each row's discounted return-to-go
        observations = np.concatenate([np.asarray(e.get_observations())[:-1] for e in episodes])
        np.testing.assert_array_equal(learner_batch[Columns.OBS].numpy(), observations)
        gamma = config.credit.gamma
        to_go = [sum(gamma ** (k - t) * r for k, r in enumerate(e.get_rewards()) if k >= t)
                 for e in episodes for t in range(len(e))]
        np.testing.assert_allclose(learner_batch[Postprocessing.VALUE_TARGETS].numpy(), to_go, rtol=1e-5, atol=1e-6)
        # the step-level term is active: advantages vary inside some trajectory
        traj = np.asarray(rows["traj"])
        assert any(np.ptp(got[traj == i]) > 0 for i in np.unique(traj))
        # a batch holding a partial group is refused rather than silently mis-credited
        with pytest.raises(ValueError, match="complete groups"):
            run_connector(episodes[1:])
    finally:
        algo.stop()


@pytest.mark.slow
def test_ecpo_success_rises_on_divergent_anchor_corridors():
    """Depth-5 corridors (random policy ~0.33 success, best ~0.86). Seeds fixed; margin 0.15."""
    config = (CandidateECPOConfig()
              .environment("ecpo/DivergentAnchor-v0",
                           env_config={"env_kwargs": {"depth": 5, "num_tasks": 2}, "max_candidates": 4,
                                       "feature_dim": 32, "seed": 0})
              .training(group_size=8, groups_per_batch=4, estimator="ecpo", credit={"d_min": 2}, lr=1e-2,
                        num_epochs=4, minibatch_size=None, grad_clip=None, use_kl_loss=False)  # PPO-style, not
              .debugging(seed=0))                                                             # the LLM defaults
    algo = config.build_algo()
    try:
        success = [algo.train()["ecpo_sampling"]["success_rate"] for _ in range(15)]
    finally:
        algo.stop()
    assert np.mean(success[-3:]) >= success[0] + 0.15, success


def test_checkpoint_save_and_restore(tmp_path):
    algo = small_config().build_algo()
    try:
        algo.train()
        saved = module_weights(algo)
        algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    try:
        assert type(restored).__name__ == "CandidateECPO" and restored.config.group_size == N
        assert not weights_differ(saved, module_weights(restored))
        result = restored.train()
        assert result["learners"]["ecpo"]["batch_group_size_min"] == N
    finally:
        restored.stop()
