"""ECPOConfig's group and credit settings (ray imported, not started): the credit forms, the one-line refusals."""

import pytest

pytest.importorskip("ray")

from ecpo_train.core import credit
from ecpo_train.integrations.rllib import ECPOConfig


def llm_config() -> ECPOConfig:
    """An LLM config on the corridors naming a hub model (validate() leaves a hub id to the runners)."""
    return ECPOConfig().environment("ecpo/DivergentAnchor-v0").rl_module(model_config={"model": "org/some-model"})


def test_ecpo_config_credit_forms():
    assert ECPOConfig().credit == credit.CreditConfig()  # the defaults live in credit.py only
    config = ECPOConfig().training(credit={"kappa": 3.0}).training(credit={"eps": 1e-5})
    assert config.credit == credit.CreditConfig(kappa=3.0, eps=1e-5)  # a dict changes the fields it names
    config.training(credit=credit.CreditConfig(tau=4.0))  # a CreditConfig replaces the whole configuration
    assert config.credit == credit.CreditConfig(tau=4.0)
    config.training(gamma=0.8)  # RLlib's discount is the credit's
    assert config.gamma == config.credit.gamma == 0.8
    restored = ECPOConfig.from_dict(config.serialize())
    assert restored.credit == config.credit and restored.gamma == 0.8
    assert config.copy().credit == config.credit
    with pytest.raises(ValueError, match="unknown credit hyperparameter"):
        ECPOConfig().training(credit={"kapa": 3.0})
    with pytest.raises(TypeError, match=r"training\(credit="):  # the old flat spelling points to the new one
        ECPOConfig().training(kappa=3.0)
    with pytest.raises(TypeError, match="CreditConfig"):
        ECPOConfig().training(credit=3.0)
    with pytest.raises(ValueError, match="anchor_key"):
        llm_config().training(anchor_key="task").validate()
    with pytest.raises(ValueError, match="'gae'"):
        llm_config().training(estimator="gae").validate()
    with pytest.raises(ValueError, match=r"ECPO trains an LLM: name it with rl_module\(model_config="):
        ECPOConfig().environment("ecpo/DivergentAnchor-v0").validate()


def test_a_bad_anchor_key_is_the_same_one_line_error_on_every_config():
    """The anchor-key rule lives in one function (core.rollout.check_anchor_key): the native config and the LLM
    ECPOConfig refuse the same value in the same words (so does the classic-RL example, examples/rllib_candidate)."""
    from ecpo_train.runtime.config import make_config

    expected = "anchor_key='task'; valid: state_key, observation_key"
    messages = []
    for refuse in (
        lambda: make_config({"anchor_key": "task"}),
        lambda: llm_config().training(anchor_key="task").validate(),
    ):
        with pytest.raises(ValueError) as error:
            refuse()
        messages.append(str(error.value))
    assert messages == [expected] * len(messages)
