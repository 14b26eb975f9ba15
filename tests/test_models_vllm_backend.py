"""The vLLM backend's CPU-testable surface: lazy import, clear error without vLLM, weight naming."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys

import pytest
import torch

from ecpo_train.policies.vllm_backend import GenerationBackend, VLLMBackend, named_tensors


def test_importing_the_backend_does_not_import_vllm():
    code = "import sys, ecpo_train.policies.vllm_backend; assert 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_missing_vllm_is_a_clear_import_error():
    with pytest.raises(ImportError, match=r"pip install 'ecpo\[vllm\]'"):
        VLLMBackend("/nonexistent/model")


def test_named_tensors_from_module_and_state_dict_agree():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    from_module = named_tensors(model)
    from_state = named_tensors(model.state_dict())
    assert [name for name, _ in from_module] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [name for name, _ in from_state] == [name for name, _ in from_module]
    for (_, a), (_, b) in zip(from_module, from_state):
        assert torch.equal(a, b) and not a.requires_grad


def test_backend_sample_matches_the_transformers_policy_call():
    """The vLLM backend is a drop-in for TransformersPolicy.sample: same parameters, same order."""
    llm = pytest.importorskip("ecpo_train.policies.llm")
    expected = list(inspect.signature(llm.TransformersPolicy.sample).parameters)
    assert list(inspect.signature(VLLMBackend.sample).parameters) == expected
    assert list(inspect.signature(GenerationBackend.sample).parameters) == expected
