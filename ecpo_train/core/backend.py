"""The few array operations whose spelling differs between numpy and torch: one code path for both."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class _NumpyOps:
    def asarray(self, values: Any) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)

    def index(self, codes: np.ndarray) -> np.ndarray:
        return codes

    def mask(self, flags: np.ndarray) -> np.ndarray:
        return flags

    def zeros(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float64)

    def segment_sum(self, values: np.ndarray, codes: np.ndarray, n: int) -> np.ndarray:
        return np.bincount(codes, weights=values, minlength=n)

    def segment_min(self, values: np.ndarray, codes: np.ndarray, n: int) -> np.ndarray:
        out = np.full(n, np.inf)
        np.minimum.at(out, codes, values)
        return out

    def segment_max(self, values: np.ndarray, codes: np.ndarray, n: int) -> np.ndarray:
        out = np.full(n, -np.inf)
        np.maximum.at(out, codes, values)
        return out

    def where(self, cond: Any, a: Any, b: Any) -> np.ndarray:
        return np.where(cond, a, b)

    def floor_at(self, values: np.ndarray, floor: float) -> np.ndarray:
        return np.maximum(values, floor)

    sqrt = staticmethod(np.sqrt)
    tanh = staticmethod(np.tanh)

    def host(self, values: Any) -> np.ndarray:
        return np.asarray(values)


class _TorchOps:
    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = device

    def asarray(self, values: Any) -> Any:
        return self.torch.as_tensor(values, dtype=self.torch.float64, device=self.device)

    def index(self, codes: np.ndarray) -> Any:
        return self.torch.as_tensor(codes, dtype=self.torch.int64, device=self.device)

    def mask(self, flags: np.ndarray) -> Any:
        return self.torch.as_tensor(flags, dtype=self.torch.bool, device=self.device)

    def zeros(self, n: int) -> Any:
        return self.torch.zeros(n, dtype=self.torch.float64, device=self.device)

    def segment_sum(self, values: Any, codes: Any, n: int) -> Any:
        return self.zeros(n).index_add_(0, codes, values)

    def segment_min(self, values: Any, codes: Any, n: int) -> Any:
        out = self.torch.full((n,), math.inf, dtype=self.torch.float64, device=self.device)
        return out.scatter_reduce_(0, codes, values, reduce="amin", include_self=True)

    def segment_max(self, values: Any, codes: Any, n: int) -> Any:
        out = self.torch.full((n,), -math.inf, dtype=self.torch.float64, device=self.device)
        return out.scatter_reduce_(0, codes, values, reduce="amax", include_self=True)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return self.torch.where(cond, a, b)

    def floor_at(self, values: Any, floor: float) -> Any:
        return self.torch.clamp(values, min=floor)

    def sqrt(self, values: Any) -> Any:
        return self.torch.sqrt(values)

    def tanh(self, values: Any) -> Any:
        return self.torch.tanh(values)

    def host(self, values: Any) -> np.ndarray:
        return values.detach().cpu().numpy()


def is_torch(values: Any) -> bool:
    return type(values).__module__.split(".")[0] == "torch"


def ops_of(values: Any) -> _NumpyOps | _TorchOps:
    return _TorchOps(values.device) if is_torch(values) else _NumpyOps()
