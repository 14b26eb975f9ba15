"""The example's learner connector (ECPOAdvantages, batch_from_episodes), on hand-built episodes (ray imported, not
started): the advantages are credit.compute_advantages' on the same rows, at either anchor, with every credit
field as configured; partial groups and ungrouped episodes are refused."""

import dataclasses

import numpy as np
import pytest

pytest.importorskip("ray")

from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.evaluation.postprocessing import Postprocessing

from ecpo_train.core import credit
from examples.rllib_candidate.config import CandidateECPOConfig
from examples.rllib_candidate.connector import ECPOAdvantages, batch_from_episodes
from examples.rllib_candidate.learner import ecpo_connector


def make_episode(states, observations, actions, rewards, group_key="g0"):
    """Infos as env runners record them: the reset info first, then one per step (keys of the next state)."""
    n = len(actions)
    infos = [{"group_key": group_key, "state_key": states[0], "observation_key": observations[0]}]
    for t in range(n):
        info = {"group_key": group_key, "action_key": actions[t]}
        if t + 1 < n:
            info |= {"state_key": states[t + 1], "observation_key": observations[t + 1]}
        infos.append(info)
    return SingleAgentEpisode(observations=[np.zeros(2, np.float32)] * (n + 1), actions=[0] * n, rewards=rewards,
                              infos=infos, terminated=True, len_lookback_buffer=0)


# One group of four: every copy starts in the same structured state s0, but two of them saw a different
# observation text there (p0), so the observation anchor splits what the state anchor pools.
EPISODES = [
    make_episode(["s0", "s1"], ["o0", "o1"], ["a", "x"], [0.0, 1.0]),
    make_episode(["s0", "s1"], ["o0", "o1"], ["b", "x"], [0.0, 0.0]),
    make_episode(["s0", "s1"], ["p0", "o1"], ["a", "x"], [0.0, 0.0]),
    make_episode(["s0", "s1"], ["p0", "o1"], ["b", "x"], [0.0, 1.0]),
]
STATE_KEYS = ["s0", "s1"] * 4
OBSERVATION_KEYS = ["o0", "o1", "o0", "o1", "p0", "o1", "p0", "o1"]
COLUMNS = {"group_ids": ["g0"] * 8, "traj_ids": [0, 0, 1, 1, 2, 2, 3, 3], "steps": [1, 2] * 4,
           "action_keys": ["a", "x", "b", "x", "a", "x", "b", "x"], "rewards": [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]}


def run(connector, episodes=EPISODES):
    """The connector on ``episodes``; its advantages and value targets in episode order."""
    batch = connector(rl_module=None, batch={}, episodes=episodes, shared_data={}, metrics=None)
    return tuple(np.concatenate([np.concatenate(items) for items in batch[column].values()])
                 for column in (Postprocessing.ADVANTAGES, Postprocessing.VALUE_TARGETS))


def test_batch_from_episodes_reads_the_credit_rows_of_either_anchor():
    for anchor_key, keys in (("state_key", STATE_KEYS), ("observation_key", OBSERVATION_KEYS)):
        rows = batch_from_episodes(EPISODES, anchor_key=anchor_key).credit_arrays()
        assert list(rows["anchor_keys"]) == keys
        for name, expected in COLUMNS.items():
            assert list(rows[name]) == expected, name
    with pytest.raises(ValueError, match="anchor_key"):
        batch_from_episodes(EPISODES, anchor_key="task")


def test_connector_honours_anchor_key():
    config = credit.CreditConfig(d_min=1)
    got = {}
    for anchor_key, keys in (("state_key", STATE_KEYS), ("observation_key", OBSERVATION_KEYS)):
        connector = ECPOAdvantages(estimator="ecpo", group_size=4, credit_config=config, anchor_key=anchor_key)
        got[anchor_key], _ = run(connector)
        expected, _ = credit.compute_advantages("ecpo", {**COLUMNS, "anchor_keys": keys}, dataclasses.asdict(config))
        np.testing.assert_array_equal(got[anchor_key], np.asarray(expected, dtype=np.float32))
    assert not np.allclose(got["state_key"], got["observation_key"])
    # ECPOConfig carries the choice to the learner's piece
    piece = ecpo_connector(CandidateECPOConfig().training(group_size=4, anchor_key="observation_key", credit=config))
    np.testing.assert_array_equal(run(piece)[0], got["observation_key"])


def test_every_credit_field_reaches_compute_advantages(monkeypatch):
    # every field away from its default (verl-agent compat applies to GiGPO)
    chosen = credit.CreditConfig(gamma=0.9, omega=0.5, kappa=3.0, tau=1.5, d_min=1, rho_min=0.25, eps=1e-4,
                                 compat="verl-agent", pgpo_alpha=1.0, pgpo_beta=0.5, pgpo_gamma=0.9, hgpo_history=3,
                                 hgpo_alpha=2.0, hgpo_std=False, hgpo_base_group=True, graph_gamma=0.2,
                                 graph_success_return=5.0, pace_cosine=0.9)
    defaults = credit.CreditConfig()
    assert all(getattr(chosen, f.name) != getattr(defaults, f.name) for f in dataclasses.fields(credit.CreditConfig))
    calls = []
    real = credit.compute_advantages

    def spy(name, *args, **kwargs):
        calls.append((name, args, kwargs))
        return real(name, *args, **kwargs)

    monkeypatch.setattr(credit, "compute_advantages", spy)
    as_dict = {f.name: getattr(chosen, f.name) for f in dataclasses.fields(chosen)}
    for config in (CandidateECPOConfig().training(estimator="gigpo", group_size=4, credit=chosen),
                   CandidateECPOConfig().training(estimator="gigpo", group_size=4, credit=as_dict),
                   CandidateECPOConfig().training(estimator="gigpo", group_size=4, credit={**as_dict, "gamma": 0.5}, gamma=0.9)):
        calls.clear()
        advantages, value_targets = run(ecpo_connector(config))
        (name, args, _), = calls
        assert name == "gigpo"
        assert args[1] == chosen  # the CreditConfig itself travels, every field as configured
        expected, _ = real("gigpo", COLUMNS | {"anchor_keys": STATE_KEYS}, as_dict)
        np.testing.assert_array_equal(advantages, np.asarray(expected, dtype=np.float32))
        # the value targets are the returns-to-go at the credit's gamma
        np.testing.assert_allclose(value_targets, [0.9, 1.0, 0.0, 0.0, 0.0, 0.0, 0.9, 1.0], rtol=1e-6)


def test_connector_refuses_partial_groups_and_ungrouped_episodes():
    connector = ECPOAdvantages(group_size=4, credit_config=credit.CreditConfig(d_min=1))
    with pytest.raises(ValueError, match="complete groups"):
        run(connector, EPISODES[1:])
    ungrouped = SingleAgentEpisode(observations=[np.zeros(2, np.float32)] * 2, actions=[0], rewards=[0.0],
                                   infos=[{"state_key": "s0"}, {"action_key": "a"}], len_lookback_buffer=0)
    with pytest.raises(KeyError, match="group_key"):
        batch_from_episodes([ungrouped])


def test_the_example_refuses_a_bad_anchor_key_in_the_library_s_words():
    expected = "anchor_key='task'; valid: state_key, observation_key"
    for refuse in (lambda: CandidateECPOConfig().training(anchor_key="task").validate(),
                   lambda: ECPOAdvantages(anchor_key="task"),
                   lambda: batch_from_episodes(EPISODES, anchor_key="task")):
        with pytest.raises(ValueError) as error:
            refuse()
        assert str(error.value) == expected
