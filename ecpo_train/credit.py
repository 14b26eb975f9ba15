"""The public credit API, ``from ecpo_train.credit import compute_advantages``: the names of
:mod:`ecpo_train.core.credit`, where the estimators live."""

from ecpo_train.core.credit import *
from ecpo_train.core.credit import __all__  # noqa: F401
