"""Policies: the LLM policy (transformers; vLLM backend on GPU), small policies for CPU studies, and
response parsing (``parsing``)."""

# The model `make demo` trains and every "no model" hint names (`ecpo models pull DEMO_MODEL`). It lives here, the
# lowest layer that names a model, so the config and the policy import it downward; the CLI's registry
# (``runtime/models.py``) says how to fetch it.
DEMO_MODEL = "smollm2-135m-instruct"
# The weight dtypes a transformers policy loads in (the trainer's `dtype`, the leaderboard's `--dtype`).
DTYPES = ("float32", "float16", "bfloat16")
