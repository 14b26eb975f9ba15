"""The runtime that drives the algorithm core: the native trainer, its config and presets, run folders,
distributed sharding, plotting.

``VALIDATION_TEMPERATURE`` is the paper's validation sampling temperature (App. A): the trainer's
``val_temperature`` default and the leaderboard's ``--temperature`` default. It lives here, in a module that imports
nothing, so the light command-line modules can read it without loading torch.
"""

VALIDATION_TEMPERATURE = 0.4
