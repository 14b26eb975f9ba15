"""Policies: the LLM policy (transformers; vLLM backend on GPU), small policies for CPU studies, and
response parsing (``parsing``)."""
