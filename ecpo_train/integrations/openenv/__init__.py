"""Every ``ecpo/*`` environment as an OpenEnv server (``ecpo serve ENV_ID``), its client, and ECPO's credit for
TRL's ``GRPOTrainer`` on those episodes.

``models``: the wire types (one action, one observation, one state for every family); ``server``: the adapter
from a Gymnasium ``TextAgentEnv`` to OpenEnv's ``Environment`` and the guarded app ``ecpo serve`` runs;
``client``: OpenEnv's ``EnvClient`` for it; ``trl_credit``: the per-turn ECPO advantages for a TRL run. Each needs
the optional ``openenv`` extra (``pip install 'ecpo[openenv]'``; ``trl_credit`` also ``ecpo[trl]``); importing
this package alone needs neither.
"""
