"""The public RLlib API, ``from ecpo_train.rllib import ECPOConfig``: the names of
:mod:`ecpo_train.integrations.rllib`, where the algorithm lives. Importing it imports ray."""

from ecpo_train.integrations.rllib import *
from ecpo_train.integrations.rllib import __all__  # noqa: F401
