"""A LoRA adapter folder's checksums are compared where it is read (issue 70, item 4 for adapters): a run's
checkpoint writes ``adapter/`` with its ``checksums.sha256`` (``lora.save_adapter``), and merging it into a plain
model (``lora.merge_adapter``, what the checkpoint's ``merged/`` and vLLM are built from) refuses a changed file in
one line naming it, before peft reads it (before: the flipped weights were merged silently)."""

from __future__ import annotations

import pytest
from conftest import lora_policy

from ecpo_train.files.checksums import CHECKSUM_FILE

pytest.importorskip("peft")

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


def _flip_one_data_byte(path) -> None:
    raw = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(raw[:8], "little")  # (a safetensors file: its header stays valid)
    raw[start + (len(raw) - start) // 2] ^= 0x40
    path.write_bytes(bytes(raw))


def test_a_changed_adapter_file_is_one_line_before_it_is_merged(tiny_model_dir, tmp_path):
    from ecpo_train.policies.lora import merge_adapter, save_adapter

    policy = lora_policy(tiny_model_dir, LORA)
    adapter = save_adapter(policy.lora_model, tmp_path / "adapter")
    assert (adapter / CHECKSUM_FILE).is_file()
    merged = merge_adapter(tiny_model_dir, adapter, tmp_path / "merged")  # an intact adapter merges
    assert (merged / "config.json").is_file()
    weights = adapter / "adapter_model.safetensors"
    _flip_one_data_byte(weights)
    with pytest.raises(ValueError) as refused:
        merge_adapter(tiny_model_dir, adapter, tmp_path / "merged-again")
    line = str(refused.value)
    assert "\n" not in line and len(line) < 600, line
    assert "LoRA adapter" in line and "adapter_model.safetensors does not match its sha256" in line, line
    assert not (tmp_path / "merged-again").exists()
