"""The runtime that drives the algorithm core: the native trainer, its config and presets, run folders,
distributed sharding, plotting.

``VALIDATION_TEMPERATURE`` is the paper's validation sampling temperature (App. A): the trainer's
``val_temperature`` default and the leaderboard's ``--temperature`` default. It lives here, in a module that imports
nothing, so the light command-line modules can read it without loading torch.
"""

VALIDATION_TEMPERATURE = 0.4
# The lowest sampling temperature above 0 (greedy): logits / T must stay finite in float32 (1e-300 made every
# probability nan mid-run); at 0.001 a logit gap of 0.05 already picks the best action with probability 1 - 2e-22.
MIN_TEMPERATURE = 1e-3
