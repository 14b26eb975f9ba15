"""scripts/device_bundle_ray.py, the bundle's Ray part (its ``build`` here, its ``install`` on the device): the
Ray commands carry every Ray file once, each command under the transfer limit with at most 8 paths; a missing Ray
section or a corrupt part is one line (exit 2), also from the script run as a program; both scripts load with
the standard library only; and (slow: downloads from the package registry once into the wheel cache, then reuses
it) the Ray wheels, cut into parts and joined back byte for byte, install offline into a clean Python 3.12 target
where ``ray.rllib`` imports and a Ray session runs a task. ``import ecpo_train.rllib`` itself needs torch (no
Python 3.12 torch here): tests/test_rllib_gpu.py runs the engine on this interpreter with only the device's
packages, the native bundle's and ``RAY_BUNDLED`` importable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import device_bundle
import device_bundle_ray
import pytest
from conftest import python312

ROOT = Path(__file__).resolve().parents[1]

MIB = 1 << 20
# what `import ray.rllib` and a Ray session need from the device (RAY_DEVICE_ROOTS and their requirements) and from
# the native bundle's wheels (gymnasium, pydantic): a Python 3.12 torch (900 MB) is not among them
DEVICE_STAND_INS = ("numpy", "pandas", "pyarrow", "python-dateutil", "pyyaml", "packaging", "click", "filelock",
                    "typing-extensions", "idna", "fsspec",
                    "gymnasium", "cloudpickle", "farama-notifications", "pydantic", "pydantic-core", "annotated-types",
                    "typing-inspection")


def _section(sizes: list[int], whole: int) -> dict:
    """A Ray section of whole wheels of ``whole`` bytes in all and one split wheel of parts of ``sizes`` bytes."""
    return {"wheels": [{"path": "ray/wheels/a.whl", "bytes": whole}],
            "split": [{"whole": {"path": "ray/joined/ray.whl", "bytes": sum(sizes)},
                       "parts": [{"path": f"ray/parts/ray.whl.part0{k}", "bytes": b} for k, b in enumerate(sizes)]}]}


def test_the_ray_commands_carry_every_file_once_under_the_limit():
    section = _section([40 * MIB, 36 * MIB], 36 * MIB)
    commands = device_bundle_ray.plan_ray_commands(section, tree=21 * MIB)
    carried = [path for c in commands for path in c["carry"] if not path.endswith("manifest.json")]
    assert sorted(carried) == ["device_bundle/ray/parts/ray.whl.part00", "device_bundle/ray/parts/ray.whl.part01",
                               "device_bundle/ray/wheels"]
    assert all(c["carry"][0] == "device_bundle/manifest.json" for c in commands)  # each command can check its files
    assert all(c["mib"] * MIB <= device_bundle.TRANSFER_LIMIT and len(c["carry"]) <= 8 for c in commands)
    assert len(commands) == 3  # 40 + 36 + 36 MiB beside a 21 MiB tree: no two fit one command
    small = device_bundle_ray.plan_ray_commands(_section([10 * MIB] * 9, MIB), tree=MIB)
    assert [len(c["carry"]) for c in small] == [8, 4]  # the manifest and 7 files, then the other 3: 8 paths a command
    with pytest.raises(device_bundle.BundleError, match="smaller --part-mib"):
        device_bundle_ray.plan_ray_commands(section, tree=30 * MIB)


NO_RAY = "has no Ray wheels: add them with `python scripts/device_bundle_ray.py build`"


def test_without_a_ray_section_the_install_step_is_one_line(tmp_path, capsys):
    (tmp_path / "manifest.json").write_text(json.dumps({"wheels": [], "tokenizer": {}, "model": {}}))
    assert device_bundle_ray.main(["install", "--bundle", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'manifest.json'} {NO_RAY}"


def test_the_script_run_from_the_checkout_reports_a_ray_error_in_one_line(tmp_path):
    """``python scripts/device_bundle_ray.py install`` imports device_bundle by its name: the BundleError that
    module raises is the one this script's main catches (one line, exit 2, no traceback)."""
    (tmp_path / "manifest.json").write_text(json.dumps({"wheels": [], "tokenizer": {}, "model": {}}))
    done = subprocess.run([sys.executable, "scripts/device_bundle_ray.py", "install", "--bundle", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"error: {tmp_path / 'manifest.json'} {NO_RAY}\n"


def test_both_scripts_import_only_the_standard_library_and_each_other_at_load():
    """They run on the device before anything is installed (build-time helpers import more, inside functions)."""
    import ast

    for name in ("device_bundle", "device_bundle_ray"):
        tree = ast.parse((ROOT / "scripts" / f"{name}.py").read_text())
        loaded = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
        loaded |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
        assert loaded - set(sys.stdlib_module_names) - {"__future__", "device_bundle"} == set(), name


def test_a_corrupt_ray_part_is_one_line_and_nothing_is_installed(tmp_path, capsys):
    whole = tmp_path / "downloads" / "ray-0-py3-none-any.whl"
    whole.parent.mkdir()
    whole.write_bytes(os.urandom(5000))
    parts = device_bundle.split_file(whole, tmp_path / "ray" / "parts", 2048)
    section = {"wheels": [], "split": [{"whole": {"path": f"ray/joined/{whole.name}", "bytes": 5000,
                                                  "sha256": device_bundle.sha256(whole)},
                                        "parts": [device_bundle.file_entry(p, tmp_path) for p in parts]}]}
    (tmp_path / "manifest.json").write_text(json.dumps({"wheels": [], "tokenizer": {}, "model": {}, "ray": section}))
    parts[2].write_bytes(b"x" + parts[2].read_bytes()[1:])
    assert device_bundle_ray.main(["install", "--bundle", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {parts[2]} is corrupt") and len(err.splitlines()) == 1
    assert not (tmp_path / "ray" / "site").exists() and not (tmp_path / "ray" / "joined").exists()


def _downloaded(call):
    """``call()``, or a skip naming the registry when pip cannot reach it (a CI runner without network)."""
    try:
        return call()
    except device_bundle.BundleError as err:
        text = str(err)
        if any(sign in text for sign in ("Could not find a version", "No matching distribution", "connection",
                                         "Connection", "Network", "Max retries", "Temporary failure")):
            pytest.skip(f"the package registry is unreachable from here: {text[-200:]}")
        raise


SESSION = """
import sys
import ray, ray.rllib
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
square = ray.remote(lambda x: x * x)
print(ray.__version__, ray.get(square.remote(7)), AlgorithmConfig().num_gpus_per_learner, sys.version_info[:2])
ray.shutdown()
"""


@pytest.mark.slow
def test_the_ray_wheels_install_offline_into_a_clean_python312_target(tmp_path):
    python = python312()
    if python is None:
        pytest.skip("no python3.12 on this machine")
    bundle = tmp_path / "device_bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text(json.dumps({"wheels": [], "tokenizer": {}, "model": {}, "commands": []}))
    # parts of 20 MiB (the build's default): with the checkout's tree (about 35 MiB) each fits one 64 MiB command
    manifest = _downloaded(lambda: device_bundle_ray.add_ray(bundle, part_mib=20))
    section = manifest["ray"]
    names = {e["path"].split("/")[-1].split("-")[0].lower().replace("_", "-")
             for e in section["wheels"] + [s["whole"] for s in section["split"]]}
    assert names == set(device_bundle_ray.RAY_BUNDLED)
    # ray's 79 MB wheel is cut into parts (at 20 MiB scipy's too)
    assert "ray" in [s["whole"]["path"].split("/")[-1].split("-")[0] for s in section["split"]]
    assert all(part["bytes"] <= 20 * MIB for s in section["split"] for part in s["parts"])
    # the device's own packages that ray.rllib needs stand in for all of them, in a folder of their own
    provided = device_bundle_ray.WHEEL_CACHE
    _downloaded(lambda: device_bundle.download_wheels(
        [f"{name}=={device_bundle.installed_version(name)}" for name in DEVICE_STAND_INS], provided))
    stand_ins = [device_bundle_ray.cached_wheel(provided, name, device_bundle.installed_version(name))
                 for name in DEVICE_STAND_INS]
    device = device_bundle.install_wheels(stand_ins, tmp_path / "device", python)
    site = device_bundle_ray.install_ray(bundle, python, importable=(str(device),))  # imports ray.rllib there
    split = section["split"][0]
    joined = bundle / split["whole"]["path"]  # the parts joined back byte for byte
    assert joined.read_bytes() == (device_bundle_ray.WHEEL_CACHE / joined.name).read_bytes()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join([str(site), str(device)])}
    done = subprocess.run([python, "-s", "-c", SESSION], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[:3] == [device_bundle.installed_version("ray"), "49", "0"]
