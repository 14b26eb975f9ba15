"""The RLlib engine's part of the offline bundle (``scripts/device_bundle.py``): Ray's wheels, in parts, and the
device step that installs them.

    python scripts/device_bundle_ray.py build [--out DIR] [--part-mib 20]   # here, after device_bundle.py build
    python3 scripts/device_bundle_ray.py install [--bundle DIR]             # on the device, after its install

``build`` runs ``add_ray``: it adds ``RAY_BUNDLED``'s wheels (``ray`` at this venv's version and what
``ecpo_train.rllib`` imports that the device lacks) under ``<bundle>/ray/``, the wheels larger than ``--part-mib``
cut into checksummed parts, and the commands that carry them (``plan_ray_commands``). ``install`` runs
``install_ray``: it checks and joins them, installs them into ``<bundle>/ray/site`` and imports ``ray.rllib`` there.

The checksums, parts, manifest, pip calls and the one-line ``BundleError`` are ``device_bundle``'s (imported by
name from this folder, which is on ``sys.path`` when the script runs). Standard library only, like
``device_bundle``: it runs before anything is installed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from device_bundle import (
    DEFAULT_BUNDLE,
    DEVICE_ROOTS,
    MANIFEST,
    TRANSFER_LIMIT,
    BundleError,
    check_file,
    download_wheels,
    file_entry,
    install_wheels,
    installed_version,
    join_parts,
    read_manifest,
    sha256,
    split_file,
    tree_bytes,
)

# ``build``: what the RLlib engine (``import ecpo_train.rllib``, ray[rllib]) imports that a GPU machine
# with RAY_DEVICE_ROOTS (and BUNDLED) lacks, found by importing it with only those importable; tests/test_rllib_gpu.py
# runs the engine so; lz4 too, whose absence RLlib warns about at import. ray[rllib]'s other requirements
# (tensorboardX, ormsgpack, ...) are not imported on the engine's path.
RAY_BUNDLED = ("ray", "msgpack", "protobuf", "requests", "urllib3", "certifi", "charset-normalizer", "jsonschema",
               "attrs", "referencing", "rpds-py", "jsonschema-specifications", "dm-tree", "scipy", "lz4")
RAY_DEVICE_ROOTS = (*DEVICE_ROOTS, "numpy", "pandas", "pyarrow")  # ray.tune, which RLlib imports, needs the last two
RAY_FOLDER = "ray"  # <bundle>/ray: wheels/ (whole), parts/ (the larger ones cut), site/ (installed by `install`)
# pip download --dest reuses a wheel already there: a rebuild (or the bundle test) does not download Ray again
WHEEL_CACHE = Path(os.environ.get("ECPO_BUNDLE_CACHE", Path.home() / ".cache" / "ecpo" / "bundle-wheels"))
MAX_CARRY_PATHS = 8  # paths one device command may carry


# ---------------------------------------------------------------------------------------------- build (here)
def cached_wheel(cache: Path, name: str, version: str) -> Path:
    """The wheel of ``name==version`` that ``download_wheels`` left in ``cache``."""
    stem = f"{name.replace('-', '_')}-{version}-".lower()
    found = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(stem))
    if not found:
        raise BundleError(f"no wheel of {name}=={version} in {cache} after pip download")
    return found[0]


def add_ray(out: Path, part_mib: float, cache: Path = WHEEL_CACHE) -> dict:
    """``build``: ``RAY_BUNDLED``'s Python 3.12 wheels at the versions installed here into
    ``out/ray`` (those larger than ``part_mib`` MiB cut into checksummed parts), their entries and device commands
    added to ``out/manifest.json`` under ``"ray"``; returns the manifest."""
    manifest = read_manifest(out)
    folder = out / RAY_FOLDER
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "wheels").mkdir(parents=True)
    wanted = {name: installed_version(name) for name in RAY_BUNDLED}
    cache.mkdir(parents=True, exist_ok=True)
    download_wheels([f"{name}=={version}" for name, version in wanted.items()], cache)
    part_bytes = int(part_mib * (1 << 20))
    section: dict = {"wheels": [], "split": []}
    for name, version in wanted.items():
        wheel = cached_wheel(cache, name, version)
        if wheel.stat().st_size <= part_bytes:
            shutil.copyfile(wheel, folder / "wheels" / wheel.name)
            section["wheels"].append(file_entry(folder / "wheels" / wheel.name, out))
            continue
        parts = split_file(wheel, folder / "parts", part_bytes)
        whole = {"path": f"{RAY_FOLDER}/joined/{wheel.name}", "bytes": wheel.stat().st_size, "sha256": sha256(wheel)}
        section["split"].append({"whole": whole, "parts": [file_entry(part, out) for part in parts]})
    section["commands"] = plan_ray_commands(section, tree_bytes())
    manifest["ray"] = section
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def ray_files(section: dict) -> list[dict]:
    """The entries of the Ray files a bundle carries: the whole wheels and the parts of the others."""
    return section["wheels"] + [part for split in section["split"] for part in split["parts"]]


def plan_ray_commands(section: dict, tree: int, limit: int = TRANSFER_LIMIT) -> list[dict]:
    """The device commands that carry the Ray wheels, after ``plan_commands``': each carries the manifest and
    as many Ray files as fit under ``limit`` with the tree (the folder of whole wheels travels as one path; the
    largest files are placed first, each in the first command it fits), at most ``MAX_CARRY_PATHS`` paths."""
    folder = DEFAULT_BUNDLE.name
    items = [(f"{RAY_FOLDER}/wheels", sum(e["bytes"] for e in section["wheels"]))] if section["wheels"] else []
    items += [(part["path"], part["bytes"]) for split in section["split"] for part in split["parts"]]
    base = tree + 4096  # the tree and the manifest
    commands: list[dict] = []
    for path, size in sorted(items, key=lambda item: -item[1]):
        if base + size > limit:
            raise BundleError(f"{path} ({size / (1 << 20):.1f} MiB) does not fit one command of "
                              f"{limit / (1 << 20):.0f} MiB with a {tree / (1 << 20):.1f} MiB tree: rebuild with a "
                              "smaller --part-mib")
        command = next((c for c in commands if c["bytes"] + size <= limit and len(c["carry"]) < MAX_CARRY_PATHS),
                       None)
        if command is None:
            command = {"carry": [MANIFEST], "bytes": base}
            commands.append(command)
        command["carry"].append(path)
        command["bytes"] += size
    return [{"carry": [f"{folder}/{path}" for path in c["carry"]], "mib": round(c["bytes"] / (1 << 20), 1)}
            for c in commands]


# ---------------------------------------------------------------------------------------------- device side
def install_ray(bundle: Path, python: str = sys.executable, importable: tuple[str, ...] = ()) -> Path:
    """The ``install`` step on the device: check the Ray wheels and parts, join the parts, install every Ray wheel
    into ``<bundle>/ray/site`` and import ``ray.rllib`` there (with ``<bundle>/site``, the native wheels, and
    ``importable``); return the site folder. A missing or corrupt file, or a package the device lacks, is one
    ``BundleError`` naming it."""
    manifest = read_manifest(bundle)
    section = manifest.get("ray")
    if not section:
        raise BundleError(f"{bundle / MANIFEST} has no Ray wheels: add them with "
                          "`python scripts/device_bundle_ray.py build`")
    hint = "copy it again with the Ray commands (docs/gpu.md, 'The RLlib engine on one GPU')"
    wheels = [check_file(bundle, entry, hint) for entry in section["wheels"]]
    for split in section["split"]:
        wheels.append(join_parts(bundle, split["whole"], split["parts"], bundle / split["whole"]["path"]))
    site = install_wheels(wheels, bundle / RAY_FOLDER / "site", python)
    paths = [str(site), str(bundle / "site"), *importable]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run([python, "-c", "import ray, ray.rllib; print(ray.__version__)"], capture_output=True,
                          text=True, env=env, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()
        raise BundleError(f"ray.rllib does not import with the bundle ({tail[-1] if tail else 'no output'}): this "
                          f"machine lacks a package RLlib needs; RAY_DEVICE_ROOTS assumes {', '.join(RAY_DEVICE_ROOTS)}")
    return site


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    build_args = steps.add_parser("build", help="add the Ray wheels to a built bundle (needs PyPI)")
    build_args.add_argument("--out", type=Path, default=DEFAULT_BUNDLE)
    build_args.add_argument("--part-mib", type=float, default=20.0,
                            help="largest part, MiB (small parts pack the commands tightly)")
    install_args = steps.add_parser("install", help="check and join the Ray wheels' parts, install them (offline; "
                                                    "after device_bundle.py install)")
    install_args.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    args = parser.parse_args(argv)
    try:
        if args.step == "build":
            manifest = add_ray(args.out, args.part_mib)
            ray_bytes = sum(e["bytes"] for e in ray_files(manifest["ray"]))
            print(f"{args.out / RAY_FOLDER}: {len(RAY_BUNDLED)} Ray wheels ({ray_bytes / (1 << 20):.1f} MiB)")
            for k, command in enumerate(manifest["ray"]["commands"], 1):
                print(f"Ray command {k} carries {command['mib']} MiB with the tree: {json.dumps(command['carry'])}")
        else:
            print(f"installed Ray into {install_ray(args.bundle)}")
    except BundleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
