"""What an RLlib module of this project is: built only the way RLlib 2.60 asks (keyword arguments ``observation_space``,
``action_space``, ``inference_only``, ``learner_only``, ``model_config``), so the next RLlib release, which drops the
``RLModule(config=RLModuleConfig)`` form, builds them unchanged.

RLlib 2.60's own ``RLModule.__init__`` still makes an ``RLModuleConfig`` for every module it builds, ours and its
own containers (``MultiRLModule``) alike, for its back-compat ``module.config``; making one logs RLlib's notice
that the old form is deprecated, once per process, whichever form was used. Every process that builds one of these
modules imports this one, which leaves that notice out of RLlib's deprecation log (``OLD_FORM_NOTICE``): these
modules never take or read an ``RLModuleConfig`` (``tests/test_rllib_module_api.py``), and a module that is
given one still fails, loudly, in RLlib's own check.
"""

from __future__ import annotations

import logging
from typing import Any

from ray.rllib.core.rl_module.torch import TorchRLModule

DEPRECATION_LOGGER = "ray._common.deprecation"  # the logger RLlib's deprecation notices go through
OLD_FORM_NOTICE = "RLModule(config=[RLModuleConfig object])"  # what RLlib calls the form it makes itself


class _WithoutOldFormNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return OLD_FORM_NOTICE not in record.getMessage()


OLD_FORM_FILTER = _WithoutOldFormNotice()
logging.getLogger(DEPRECATION_LOGGER).addFilter(OLD_FORM_FILTER)  # (adding the same filter again is a no-op)


class GroupCreditModule(TorchRLModule):
    """A ``TorchRLModule`` built from keyword arguments only: ``Module(RLModuleConfig(...))``, the old form, is a
    ``TypeError`` here rather than a path RLlib keeps for one more release."""

    def __init__(self, *, observation_space: Any = None, action_space: Any = None, inference_only: bool | None = None,
                 learner_only: bool = False, model_config: Any = None, catalog_class: Any = None, **kwargs: Any) -> None:
        super().__init__(observation_space=observation_space, action_space=action_space, inference_only=inference_only,
                         learner_only=learner_only, model_config=model_config, catalog_class=catalog_class, **kwargs)
