"""A safetensors file kept as its difference from a base (``ecpo_train/files/weights_delta.py``): rebuilt to the very
bytes it was taken from, smaller where few rows changed, and refused where it does not fit the base."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load, save

from ecpo_train.files.weights_delta import ROWS, difference, rebuild


def weights(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"words.weight": torch.randn(500, 16, generator=generator), "score.bias": torch.randn(8, generator=generator),
            "score.weight": torch.randn(8, 24, generator=generator)}


def test_a_float16_policy_is_rebuilt_byte_for_byte_from_its_float32_base_and_only_its_changed_rows():
    base = weights()
    tuned = {name: tensor.half() for name, tensor in base.items()}
    tuned["words.weight"][[3, 40, 41]] += 0.5  # RL moved three rows of the word table
    tuned["score.bias"][2] += 1
    tuned["score.weight"] += 0.25  # and every row of a layer
    base_bytes, tuned_bytes = save(base), save(tuned)
    delta = difference(tuned_bytes, base_bytes)
    assert rebuild(delta, base_bytes) == tuned_bytes
    kept = load(delta)
    assert kept["words.weight" + ROWS].tolist() == [3, 40, 41] and kept["words.weight"].dtype == torch.float16
    assert kept["score.bias" + ROWS].tolist() == [2] and len(kept["score.weight" + ROWS]) == 8
    assert len(delta) < len(tuned_bytes) / 4


def test_a_zero_whose_sign_changed_is_a_changed_row():
    """Equal means the same bytes: -0.0 and 0.0 compare equal as numbers but are different weights files."""
    base = {"w": torch.zeros(4, 2)}
    tuned = {"w": torch.zeros(4, 2)}
    tuned["w"][1, 0] = -0.0
    delta = difference(save(tuned), save(base))
    assert load(delta)["w" + ROWS].tolist() == [1] and rebuild(delta, save(base)) == save(tuned)


@pytest.mark.parametrize("damage", ["other base", "row out of range", "missing tensor"])
def test_a_difference_that_does_not_fit_its_base_is_refused(damage):
    base, tuned = weights(), weights()
    tuned["words.weight"][7] += 1
    delta = difference(save(tuned), save(base))
    if damage == "other base":
        other = weights() | {"words.weight": torch.zeros(500, 8)}  # rows of another size
        with pytest.raises(ValueError, match="do not fit"):
            rebuild(delta, save(other))
        return
    kept = load(delta)
    if damage == "row out of range":
        kept["words.weight" + ROWS] = torch.tensor([500])
    else:
        del kept["score.bias"]
    with pytest.raises(ValueError, match="do not fit|tensors differ"):
        rebuild(save(kept), save(base))


def test_weights_and_a_base_with_other_tensors_are_refused():
    with pytest.raises(ValueError, match="different tensors"):
        difference(save(weights()), save({"w": torch.zeros(2)}))
