"""The scale benchmarks run: memory.py counts the published parameter numbers (the GPU run's own tests are in
tests/test_gpu_run.py)."""

import pytest

from benchmarks import memory


def test_memory_benchmark_counts_the_published_parameter_numbers():
    # Qwen2.5 model cards: 1.54B and 7.61B parameters
    assert memory.parameter_count(memory.QWEN25["Qwen2.5-1.5B"]) / 1e9 == pytest.approx(1.54, abs=0.01)
    assert memory.parameter_count(memory.QWEN25["Qwen2.5-7B"]) / 1e9 == pytest.approx(7.61, abs=0.01)
    table = {(r["model"], r["setting"]): r["total_gb"] for r in memory.computed_table()}
    full, lora = table[("Qwen2.5-7B", "full FT + checkpointing, 1 GPU")], table[("Qwen2.5-7B", "LoRA r=16 + checkpointing, 1 GPU")]
    assert lora < full / 3
