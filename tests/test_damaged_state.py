"""Damaged checkpoints and model folders are one line, never a silent load or a traceback (issue 70, items 4, 5b, 8).

- A checkpoint carries the sha256 of its state (``checkpoint_io``), an RLlib checkpoint folder and every model
  folder the project writes a ``checksums.sha256`` (``files/checksums.py``): flipped bytes are refused where
  they are read (``ecpo eval``, ``ecpo leaderboard --agent checkpoint``, ``--resume``, ``model=`` warm starts).
- A text-policy folder is validated once, before anything is allocated from it (``check_text_policy_folder``):
  empty, cut, header-corrupt or pickle-planted weights, out-of-range or mistyped values in its json.
- A policy state in a checkpoint that does not fit (shapes, empty, generator, nan) is one line.
- ``--resume`` refuses a ``model`` folder whose weights changed since the run started (the KL reference is
  rebuilt from it).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import CORRIDOR, ENV_ID
from typer.testing import CliRunner

from ecpo_train.apps.cli import app
from ecpo_train.files.checksums import CHECKSUM_FILE
from ecpo_train.policies.text import CONFIG_FILE, WEIGHTS_FILE, TextPolicy
from ecpo_train.runtime.config import make_config

TEXT_RUN = [f"env_id={ENV_ID}", f"env_kwargs={json.dumps(CORRIDOR)}", "policy=text", "n_groups=2", "group_size=4",
            "history_length=0", "val_every=0", "credit.d_min=1", "lr=3e-3", "kl_coef=0.01", "seed=5",
            "mini_batch_size=8", "micro_batch_size=8", "num_epochs=1", "tensorboard=false", "progress=false",
            "device=cpu"]


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, *words: str) -> None:
    """Exit 2 and one ``error:`` line naming ``words``; no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error:") and "Traceback" not in result.output, result.output
    for word in words:
        assert word in lines[-1], (word, lines[-1])


def text_folder(folder: Path, seed: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    TextPolicy(seed=seed).save_pretrained(folder)
    return folder


def flip_data_bytes(path: Path, count: int = 64) -> None:
    """Flip ``count`` bytes in the middle of a safetensors file's data (its header stays valid)."""
    raw = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(raw[:8], "little")
    middle = start + (len(raw) - start) // 2
    for k in range(middle, middle + count):
        raw[k] ^= 0xFF
    path.write_bytes(bytes(raw))


def flip_checkpoint_tensor(path: Path, count: int = 64) -> None:
    """Flip ``count`` bytes inside the largest tensor stored in a torch checkpoint (a zip of records)."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
        with open(path, "rb") as handle:
            handle.seek(info.header_offset + 26)
            name_len, extra_len = (int.from_bytes(handle.read(2), "little") for _ in range(2))
        start = info.header_offset + 30 + name_len + extra_len
    raw = bytearray(path.read_bytes())
    for k in range(start, start + min(count, info.file_size)):
        raw[k] ^= 0x5A
    path.write_bytes(bytes(raw))


# ---------------------------------------------------------------------------------------------- item 4: checksums
def test_flipped_bytes_in_checkpoint_pt_are_one_line_in_eval_and_resume(tmp_path):
    """64 flipped bytes in a checkpoint's weights: ``ecpo eval``, the leaderboard's loader and ``--resume`` each
    refuse it in one line (before: weights off by up to 1e28, exit 0)."""
    from ecpo_train.evaluation.agents import load_checkpoint_policy
    from ecpo_train.runtime.checkpoint_io import DIGEST_KEY, load_checkpoint

    run = tmp_path / "run"
    done = cli("train", "--config", "quickstart", f"run_dir={run}", "n_groups=2", "group_size=2", "val_every=0",
               "progress=false", "tensorboard=false", "iterations=1")
    assert done.exit_code == 0, done.output
    checkpoint = run / "checkpoint.pt"
    assert isinstance(load_checkpoint(checkpoint)[DIGEST_KEY], str)
    flip_checkpoint_tensor(checkpoint)
    with pytest.raises(ValueError, match="does not match its sha256"):
        load_checkpoint_policy(run)
    one_line_error(cli("eval", str(run), "--limit", "1"), "sha256", "checkpoint.pt")
    one_line_error(cli("train", "--config", "quickstart", f"run_dir={run}", "n_groups=2", "group_size=2",
                       "val_every=0", "progress=false", "tensorboard=false", "iterations=2", "--resume"), "sha256")


def test_model_folders_carry_checksums_and_a_changed_file_is_one_line(tmp_path):
    """A text-policy folder is written with its ``checksums.sha256``; a byte changed in its weights afterwards is
    refused where the folder is named (``model=``: train, sft, eval), naming the file. A folder saved before
    checksums (none there, like the committed kept warm starts) loads as it is."""
    folder = text_folder(tmp_path / "warm")
    listed = (folder / CHECKSUM_FILE).read_text().splitlines()
    assert sorted(line.split("  ")[1] for line in listed) == sorted([CONFIG_FILE, WEIGHTS_FILE])
    make_config({"policy": "text", "model": str(folder), "env_id": ENV_ID})  # whole: accepted
    flip_data_bytes(folder / WEIGHTS_FILE)
    with pytest.raises(ValueError, match=f"{WEIGHTS_FILE} does not match its sha256"):
        make_config({"policy": "text", "model": str(folder), "env_id": ENV_ID})
    one_line_error(cli("train", "--config", "quickstart", f"run_dir={tmp_path / 'run'}", *TEXT_RUN,
                       f"model={folder}", "iterations=1"), "sha256")
    from ecpo_train.evaluation.agents import load_checkpoint_policy

    with pytest.raises(ValueError, match="sha256"):  # the leaderboard's --agent checkpoint --checkpoint WARM_START
        load_checkpoint_policy(folder)
    (folder / CHECKSUM_FILE).unlink()  # saved before checksums: accepted (the values are still checked)
    make_config({"policy": "text", "model": str(folder), "env_id": ENV_ID})
    kept = Path(__file__).resolve().parents[1] / "benchmarks/results/raw/estimators_households/warm"
    if (kept / CONFIG_FILE).is_file():
        TextPolicy.from_pretrained(kept)


def test_llm_folders_and_rllib_checkpoints_carry_checksums(tiny_model_dir, tmp_path):
    """The LLM model folder the project writes, and an RLlib checkpoint folder, are checked the same way."""
    import shutil

    from ecpo_train.runtime.models import check_model_folder

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    assert (model / CHECKSUM_FILE).is_file()
    check_model_folder(model)
    flip_data_bytes(model / "model.safetensors")
    with pytest.raises(ValueError, match="model.safetensors does not match its sha256"):
        check_model_folder(model)
    pytest.importorskip("msgpack")
    from ecpo_train.integrations.rllib.state_files import TENSORS_FILE, read_state, write_state

    state_dir = tmp_path / "rllib_checkpoint"
    write_state(state_dir, {"weights": torch.arange(4096, dtype=torch.float32)}, {"train_config": {}})
    assert float(read_state(state_dir)["weights"][7]) == 7.0
    flip_data_bytes(state_dir / TENSORS_FILE)
    with pytest.raises(ValueError, match="does not match its sha256"):
        read_state(state_dir)


# ---------------------------------------------------------------------------------------------- item 8: folders
def _write_json(folder: Path, change) -> None:
    config = json.loads((folder / CONFIG_FILE).read_text())
    change(config)
    (folder / CONFIG_FILE).write_text(json.dumps(config))


def _int_weights(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(folder / WEIGHTS_FILE))
    save_file({k: v.to(torch.int64) for k, v in weights.items()}, str(folder / WEIGHTS_FILE))


DAMAGE = {
    "empty weights": lambda f: (f / WEIGHTS_FILE).write_bytes(b""),
    "truncated weights": lambda f: (f / WEIGHTS_FILE).write_bytes((f / WEIGHTS_FILE).read_bytes()[:5000]),
    "header-corrupt weights": lambda f: (f / WEIGHTS_FILE).write_bytes(
        b"\xff" * 8 + (f / WEIGHTS_FILE).read_bytes()[8:]),
    "pickle-planted weights": lambda f: torch.save({"weights": torch.zeros(3)}, f / WEIGHTS_FILE),
    "int weights": _int_weights,
    "hash_buckets Infinity": lambda f: (f / CONFIG_FILE).write_text(
        (f / CONFIG_FILE).read_text().replace('"hash_buckets": 2048', '"hash_buckets": Infinity')),
    "hash_buckets 10**12": lambda f: _write_json(f, lambda c: c["vocabulary"].update(hash_buckets=10**12)),
    "hash_buckets '2048'": lambda f: _write_json(f, lambda c: c["vocabulary"].update(hash_buckets="2048")),
    "hash_buckets 2048.7": lambda f: _write_json(f, lambda c: c["vocabulary"].update(hash_buckets=2048.7)),
    "a word that is a number": lambda f: _write_json(f, lambda c: c["vocabulary"].update(known=["go", 7])),
    "embedding_dim 10**9": lambda f: _write_json(f, lambda c: c["architecture"].update(embedding_dim=10**9)),
    "not json": lambda f: (f / CONFIG_FILE).write_text("{architecture"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_text_policy_folder_is_one_line_before_anything_is_built(damage, tmp_path):
    """Each damage of a text-policy folder saved before checksums (none to catch it): refused by the config, the one
    check every path runs before building anything (train either engine, sft, eval), in one line; ``ecpo train``
    exits 2 with it (before: SafetensorError, OverflowError, MemoryError tracebacks, or a silent int cast)."""
    folder = text_folder(tmp_path / "warm")
    (folder / CHECKSUM_FILE).unlink(missing_ok=True)  # (saved before checksums)
    DAMAGE[damage](folder)
    with pytest.raises(ValueError, match="damaged text-policy folder") as refused:
        make_config({"policy": "text", "model": str(folder), "env_id": ENV_ID})
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 400
    with pytest.raises(ValueError, match="damaged text-policy folder"):
        TextPolicy.from_pretrained(folder)
    one_line_error(cli("train", "--config", "quickstart", f"run_dir={tmp_path / 'run'}", *TEXT_RUN,
                       f"model={folder}", "iterations=1", "--engine", "rllib"), "damaged text-policy folder")
    assert not (tmp_path / "run").exists()


POLICY_DAMAGE = {
    "wrong shapes": lambda s: s.update({k: torch.zeros(3) for k in list(s) if k.endswith("weight")}),
    "empty": lambda s: s.clear(),
    "bad generator state": lambda s: s.__setitem__(
        "_extra_state", s["_extra_state"] | {"generator": torch.zeros(3, dtype=torch.uint8)}),
    "nan": lambda s: s.update({k: torch.full_like(v, float("nan")) for k, v in s.items() if torch.is_tensor(v)}),
}


@pytest.mark.parametrize("damage", list(POLICY_DAMAGE))
def test_a_damaged_policy_state_in_a_checkpoint_is_one_line(damage, tmp_path):
    """A checkpoint (its sha256 right: written so) whose policy state is damaged: ``ecpo eval``, the leaderboard's
    loader and ``--resume`` refuse it in one line naming the checkpoint."""
    from ecpo_train.evaluation.agents import load_checkpoint_policy
    from ecpo_train.runtime.checkpoint_io import load_checkpoint, save_checkpoint

    run = tmp_path / "run"
    args = ["train", "--config", "quickstart", f"run_dir={run}", *TEXT_RUN]
    assert cli(*args, "iterations=1").exit_code == 0
    state = load_checkpoint(run / "checkpoint.pt")
    policy = dict(state["policy"])
    POLICY_DAMAGE[damage](policy)
    save_checkpoint(state | {"policy": policy}, run / "checkpoint.pt")
    with pytest.raises(ValueError, match="checkpoint .*checkpoint.pt: its policy"):
        load_checkpoint_policy(run)
    one_line_error(cli("eval", str(run), "--limit", "1"), "checkpoint.pt")
    one_line_error(cli(*args, "iterations=2", "--resume"), "checkpoint.pt", "policy")


# ---------------------------------------------------------------------------------------------- item 5b
def test_resume_refuses_a_model_folder_whose_weights_changed(tmp_path):
    """The start records the weights' sha256; ``--resume`` after ``model`` was replaced (``ecpo sft --out SAME``)
    is refused in one line, since the KL reference would be rebuilt from other weights. The same folder resumes."""
    folder = text_folder(tmp_path / "warm")
    run = tmp_path / "run"
    args = ["train", "--config", "quickstart", f"run_dir={run}", *TEXT_RUN, f"model={folder}"]
    assert cli(*args, "iterations=1").exit_code == 0
    text_folder(folder, seed=4)  # other weights in the same folder
    one_line_error(cli(*args, "iterations=2", "--resume"), "changed since the run started", "model=")
    text_folder(folder, seed=3)  # the weights the run started from
    resumed = cli(*args, "iterations=2", "--resume")
    assert resumed.exit_code == 0, resumed.output


@pytest.mark.parametrize("damage", ["wrong shapes", "nan"])
def test_a_damaged_module_state_is_one_line_on_the_rllib_engine(damage, tmp_path):
    """The RLlib engine restores the learner's weights through ``CausalLMRLModule.set_state`` (a resume, a weight
    sync): weights of other shapes or nan are one ``ValueError`` line (before: torch's multi-line RuntimeError, or
    nan weights loaded)."""
    pytest.importorskip("ray")
    from ecpo_train.integrations.rllib.llm.module import TRAIN_CONFIG, CausalLMRLModule

    config = make_config({"policy": "text", "model": str(text_folder(tmp_path / "warm")), "env_id": ENV_ID,
                          "env_kwargs": dict(CORRIDOR), "device": "cpu"})
    module = CausalLMRLModule(observation_space=None, action_space=None, inference_only=True,
                              model_config={TRAIN_CONFIG: config})
    state = {name: torch.as_tensor(value) for name, value in module.get_state().items()}
    name = next(iter(state))
    state[name] = torch.zeros(3) if damage == "wrong shapes" else torch.full_like(state[name], float("nan"))
    with pytest.raises(ValueError) as refused:
        module.set_state(state)
    line = str(refused.value)
    assert "\n" not in line and len(line) < 400, line
    assert ("do not fit" if damage == "wrong shapes" else "nan or infinite") in line, line


def _damage_learner_arrays(checkpoint: Path, damage: str) -> None:
    """Rewrite the learner's arrays in an RLlib checkpoint with its checksums made to agree (a hand edit, or a
    folder without checksums): the largest weight cut to 3 values, or the smallest array set to nan."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from ecpo_train.files.checksums import write_folder_checksums
    from ecpo_train.integrations.rllib.state_files import ARRAYS_FILE

    arrays = load_file(str(checkpoint / ARRAYS_FILE))
    if damage == "wrong shape":
        arrays[max(arrays, key=lambda k: arrays[k].size)] = np.zeros(3, np.float32)
    else:
        name = min(arrays, key=lambda k: arrays[k].size)
        arrays[name] = np.full_like(arrays[name], np.nan)
    save_file(arrays, str(checkpoint / ARRAYS_FILE))
    write_folder_checksums(checkpoint)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["wrong shape", "nan"])
def test_a_damaged_learner_state_is_one_line_on_rllib_resume(damage, tmp_path):
    """``ecpo train --engine rllib --learners 1 --resume`` from a checkpoint whose learner state does not fit (a
    weight of another shape, nan values) exits 2 with one line naming the file: checked on the driver before the
    state is sent to the learner actor (before: Ray logged the actor's error with its traceback and the run died
    later of an ``IndexError`` traceback, exit 1). The intact checkpoint resumes."""
    pytest.importorskip("ray")
    import shutil

    folder = text_folder(tmp_path / "warm")
    run = tmp_path / "run"
    args = ["train", "--config", "quickstart", f"run_dir={run}", *TEXT_RUN, f"model={folder}", "checkpoint_every=1",
            "threads=1", "--engine", "rllib", "--env-runners", "0", "--learners", "1"]
    assert cli(*args, "iterations=1").exit_code == 0
    intact = tmp_path / "intact"
    shutil.copytree(run / "rllib_checkpoint", intact)
    _damage_learner_arrays(run / "rllib_checkpoint", damage)
    result = cli(*args, "iterations=2", "--resume")
    one_line_error(result, "rllib_checkpoint/arrays.safetensors is damaged",
                   "has shape (3,)" if damage == "wrong shape" else "nan or infinite")
    assert len(result.output.splitlines()[-1]) < 400
    shutil.rmtree(run / "rllib_checkpoint")
    shutil.copytree(intact, run / "rllib_checkpoint")
    resumed = cli(*args, "iterations=2", "--resume")
    assert resumed.exit_code == 0, resumed.output
