"""An RLlib algorithm's state as files that run no code when read: what ``ECPO`` checkpoints are.

RLlib's own checkpoint (``Checkpointable.save_to_path``) is pickles: ``class_and_ctor_args.pkl`` and every
``state.pkl`` run code when read, so anyone who can write into a run folder could run code in the next
``--resume``. ECPO's checkpoint folder holds instead:

    state.msgpack         the state's tree (dicts, lists, tuples, numbers, strings), tensors and arrays by name
    tensors.safetensors   its torch tensors (bfloat16 included)
    arrays.safetensors    its numpy arrays
    config.yaml           what the algorithm is built from: the run's ``TrainConfig`` and its runner/learner layout
    checksums.sha256      the sha256 of each file above (``files/checksums.py``), compared before it is read

msgpack is read with no extension hook and safetensors holds raw numbers, so reading a planted or damaged folder
can fail (one ``ValueError`` naming the folder) but never executes anything. Anything else in a state (an object
only pickle could write) is refused when the checkpoint is written, naming where it sits in the state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ecpo_gym.kwargs import shown
from ecpo_train.files.checksums import check_folder_checksums, write_folder_checksums

STATE_FILE = "state.msgpack"
TENSORS_FILE = "tensors.safetensors"
ARRAYS_FILE = "arrays.safetensors"
CONFIG_FILE = "config.yaml"
# every container is tagged, so a tag can never be mistaken for a mapping of the state
_DICT, _LIST, _TUPLE, _TENSOR, _ARRAY, _SCALAR, _BIG = "__dict__", "__list__", "__tuple__", "__tensor__", \
    "__array__", "__numpy_scalar__", "__big_int__"


def write_state(folder: Path, state: Any, config: dict[str, Any]) -> None:
    """``state`` (an algorithm's ``get_state()``) and ``config`` into ``folder`` (created); ``TypeError`` naming
    the first value that is not plain data, a tensor or an array."""
    import msgpack
    import yaml
    from safetensors.numpy import save_file as save_arrays
    from safetensors.torch import save_file as save_tensors

    tensors: dict[str, torch.Tensor] = {}
    arrays: dict[str, np.ndarray] = {}

    def encode(value: Any, where: str) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**64:
            return {_BIG: str(value)}  # (a generator's 128-bit state: beyond msgpack's integers)
        if value is None or isinstance(value, (bool, int, float, str, bytes)):
            return value
        if isinstance(value, dict):
            return {_DICT: [[encode(k, f"{where} key"), encode(v, f"{where}.{k}")] for k, v in value.items()]}
        if isinstance(value, (list, tuple)):
            return {_LIST if isinstance(value, list) else _TUPLE: [encode(v, f"{where}[{i}]")
                                                                 for i, v in enumerate(value)]}
        if isinstance(value, torch.Tensor):
            name = f"t{len(tensors)}"  # (a copy: safetensors refuses tensors that share storage)
            tensors[name] = value.detach().to("cpu").contiguous().clone()
            return {_TENSOR: name}
        if isinstance(value, np.ndarray) and value.dtype != object:
            name = f"a{len(arrays)}"
            arrays[name] = np.ascontiguousarray(value)
            return {_ARRAY: name}
        if isinstance(value, np.generic) and not isinstance(value, np.object_):
            return {_SCALAR: [value.dtype.str, value.item()]}
        raise TypeError(f"the algorithm's state holds a {type(value).__name__} at {where}: an ECPO checkpoint keeps "
                        "only plain data, tensors and arrays (nothing that runs code when read)")

    tree = encode(state, "state")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STATE_FILE).write_bytes(msgpack.packb(tree, use_bin_type=True))
    save_tensors(tensors, str(folder / TENSORS_FILE))
    save_arrays(arrays, str(folder / ARRAYS_FILE))
    (folder / CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))
    write_folder_checksums(folder)  # (the engine swaps the folder in whole: the checksums come with it)


def holds_state(folder: Path) -> bool:
    """Whether ``folder`` is a checkpoint written by :func:`write_state`."""
    return (folder / STATE_FILE).is_file()


def read_state(folder: Path) -> Any:
    """The state :func:`write_state` wrote into ``folder``; anything missing, cut, changed since it was written (its
    ``checksums.sha256``; a folder written before checksums has none) or foreign is one ``ValueError`` naming the
    folder. Nothing read can run code (module docstring)."""
    import msgpack
    from safetensors.numpy import load_file as load_arrays
    from safetensors.torch import load_file as load_tensors

    check_folder_checksums(folder, f"{folder} is damaged and cannot be read",
                           "restore it from a copy, or --overwrite to start the run over")
    try:
        tree = msgpack.unpackb((folder / STATE_FILE).read_bytes(), raw=False, strict_map_key=False)
        tensors = load_tensors(str(folder / TENSORS_FILE))
        arrays = load_arrays(str(folder / ARRAYS_FILE))

        def decode(value: Any) -> Any:
            if not isinstance(value, dict):
                if isinstance(value, (list, msgpack.ExtType)):
                    raise ValueError("an untagged container")  # noqa: TRY004 (one refusal below)
                return value
            (tag, inner), = value.items()
            if tag == _DICT:
                return {decode(k): decode(v) for k, v in inner}
            if tag == _LIST:
                return [decode(v) for v in inner]
            if tag == _TUPLE:
                return tuple(decode(v) for v in inner)
            if tag == _TENSOR:
                return tensors[inner]
            if tag == _ARRAY:
                return arrays[inner]
            if tag == _BIG:
                return int(inner[:200])
            if tag == _SCALAR:
                return np.dtype(inner[0]).type(inner[1])
            raise ValueError(f"an unknown tag {shown(tag)}")

        return decode(tree)
    except Exception as err:  # noqa: BLE001 -- msgpack, safetensors and a foreign tree each raise their own types
        why = str(err).splitlines()[0][:120] if str(err) else ""
        raise ValueError(f"{folder} is damaged and cannot be read ({type(err).__name__}{': ' + why if why else ''}); "
                         "restore it from a copy, or --overwrite to start the run over") from None


def check_learner_state(state: Any, shapes: dict[str, dict[str, tuple[int, ...]]], folder: Path) -> None:
    """``ValueError`` (one line naming the file) unless the learner's state that :func:`read_state` read from
    ``folder`` fits the learner: every module weight it needs (``shapes``: module id -> name -> shape, from the
    learner's ``CausalLMRLModule.state_shapes``) and no other, each of its shape, and every float array of the
    learner's state (weights, optimizer moments) finite. Run on the driver before the state is sent to a learner
    actor: an error there is logged by Ray and lost, and the run fails later with a traceback. A state that passes
    its checksums but not this was changed by hand, or written without checksums."""
    fix = "restore it from a copy, or --overwrite to start the run over"
    learner = state.get("learner_group", {}).get("learner", {}) if isinstance(state, dict) else {}
    modules = learner.get("rl_module") if isinstance(learner, dict) else None
    if not isinstance(modules, dict):
        raise ValueError(f"{folder / STATE_FILE} is damaged: it holds no learner weights; {fix}")

    def file_of(value: Any) -> Path:
        return folder / (TENSORS_FILE if isinstance(value, torch.Tensor) else ARRAYS_FILE)

    for module_id, expected in shapes.items():
        weights = modules.get(module_id)
        if not isinstance(weights, dict):
            raise ValueError(f"{folder / STATE_FILE} is damaged: it holds no weights of module {shown(module_id)}; "
                             f"{fix}")
        for name, shape in expected.items():
            if name not in weights:
                raise ValueError(f"{folder / STATE_FILE} is damaged: it lacks the weight {shown(name)}; {fix}")
            value = weights[name]
            if not isinstance(value, (torch.Tensor, np.ndarray)) or tuple(value.shape) != tuple(shape):
                found = tuple(value.shape) if isinstance(value, (torch.Tensor, np.ndarray)) else type(value).__name__
                raise ValueError(f"{file_of(value)} is damaged: the weight {shown(name)} has shape {shown(found)}, "
                                 f"the learner's {tuple(shape)}; {fix}")
        unexpected = sorted(str(name) for name in weights if name not in expected)
        if unexpected:
            raise ValueError(f"{folder / STATE_FILE} is damaged: it holds a weight {shown(unexpected[0])} the "
                             f"learner does not have; {fix}")

    def check_finite(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                check_finite(item, f"{where}/{key}")
        elif isinstance(value, (list, tuple)):
            for k, item in enumerate(value):
                check_finite(item, f"{where}/{k}")
        elif isinstance(value, torch.Tensor) and value.is_floating_point():
            if not bool(torch.isfinite(value).all()):
                raise ValueError(f"{file_of(value)} is damaged: {shown(where)} holds nan or infinite values; {fix}")
        elif isinstance(value, np.ndarray) and value.dtype.kind in "fc" and not np.isfinite(value).all():
            raise ValueError(f"{file_of(value)} is damaged: {shown(where)} holds nan or infinite values; {fix}")

    check_finite(learner, "learner")


def read_config(folder: Path) -> dict[str, Any]:
    """The config :func:`write_state` recorded in ``folder`` (read by the project's safe YAML loader)."""
    from ecpo_train.runtime.run_dir import read_saved_config

    config = read_saved_config(folder / CONFIG_FILE)
    if config is None:
        raise ValueError(f"{folder} holds no {CONFIG_FILE}: it is not an ECPO checkpoint")
    return config
