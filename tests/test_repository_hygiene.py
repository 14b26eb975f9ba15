"""The repository carries nothing of the machine it was written on, and its front pages stay readable: no absolute
path of a development machine in any tracked file (tests find the tokenizer through ``ECPO_TOKENIZER_DIR``,
recorded configs store run folders relative), README lines of at most 200 characters, and a GPU page for any
offline machine rather than one borrowed machine's remote-run mechanics."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a home folder of root, or the workspace the project was developed in (written in pieces: this file is tracked too)
MACHINE_PATH = re.compile(rb"/" + rb"root\b|/" + rb"work/")
README_WIDTH = 200


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_tracked_file_names_a_path_of_the_development_machine():
    found = []
    for path in tracked_files():
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line[:100].decode(errors='replace')}")
    assert found == [], "\n".join(found[:20])


# an edit of the import path: programs import by package (`python -m`), tests through pytest's `pythonpath` and a
# child process's PYTHONPATH (written in pieces: this file is tracked too)
PATH_EDIT = re.compile(r"sys\.path\.(" + r"insert|append|extend)\(|sys\.path\s*(" + r"\+)?=[^=]")


def test_no_python_file_edits_sys_path():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
             for path in tracked_files() if path.suffix == ".py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if PATH_EDIT.search(line)]
    assert found == [], "\n".join(found)
    assert PATH_EDIT.search("sys.path." + "insert(0, here)") and PATH_EDIT.search("sys.path " + "+= [x]")
    assert not PATH_EDIT.search("if sys.path == saved:")


def test_the_check_sees_such_a_path():
    assert MACHINE_PATH.search(b'run_dir: "/' + b'root/ecpo_runs/pool"')
    assert MACHINE_PATH.search(b"model=/" + b"work/main/device_bundle/models/x")
    assert not MACHINE_PATH.search(b"run_dir: runs/pool  model: ~/.cache/ecpo/models/x  $ECPO_DATA_DIR/alfworld")


def test_readme_lines_fit_200_characters():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    results = lines.index("## Results")
    end = next((k for k in range(results + 1, len(lines)) if lines[k].startswith("## ")), len(lines))
    # the results table's rows are the results digest's own item (its rows become one-line answers with links)
    long = [f"{k + 1}: {len(line)}" for k, line in enumerate(lines)
            if len(line) > README_WIDTH and not (results < k < end and line.startswith("|"))]
    assert long == []


def test_the_gpu_page_is_for_any_offline_machine():
    page = (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")
    for mechanic in ("$OUT", "carry:", "timeout_s", "files_at", "30 s after"):
        assert mechanic not in page, mechanic
    assert "scaling.md" in page.split("\n## ")[0]  # which keys and how much memory come first
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.index("docs/scaling.md") < readme.index("docs/gpu.md")


def test_the_package_metadata_builds_without_a_setuptools_warning(tmp_path, monkeypatch):
    """Installing prints no setuptools warning: the license is declared the current way (an SPDX expression,
    PEP 639), and the built metadata carries it."""
    import shutil
    import warnings

    pytest.importorskip("setuptools", minversion="77")
    from setuptools import build_meta
    from setuptools.warnings import SetuptoolsWarning

    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    for package in ("ecpo_gym", "ecpo_train"):  # (the metadata does not read the modules)
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "meta").mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folder = build_meta.prepare_metadata_for_build_wheel(str(tmp_path / "meta"))
    assert [str(w.message)[:200] for w in caught if issubclass(w.category, SetuptoolsWarning)] == []
    assert "License-Expression: Apache-2.0" in (tmp_path / "meta" / folder / "METADATA").read_text().splitlines()
