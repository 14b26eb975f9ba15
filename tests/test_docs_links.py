"""Every relative link in README.md and docs/*.md points to a file that exists, and a `#heading` part to a
heading of that file (GitHub's anchor spelling), so a reader who follows the README never lands on nothing; and
every command the pages show (README.md, docs/*.md, examples/*/README.md) names what exists: an `ecpo` verb, its
options, config keys, presets and manifests; a `python -m benchmarks.NAME` module or `scripts/NAME.py`, its stage
and its options; a test file and test function."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_PAGES = [*PAGES, *sorted((ROOT / "examples").glob("*/README.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_the_readme_links_to_the_docs_pages_that_hold_its_measurements():
    targets = {t.split("#")[0] for t in links(ROOT / "README.md")}
    for page in ("docs/cpu_training.md", "docs/benchmarks.md", "docs/paper_notes.md", "docs/scaling.md",
                 "docs/rllib.md", "docs/gpu.md", "docs/environments.md", "docs/training.md"):
        assert page in targets, page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: broken links {broken}"


# ------------------------------------------------------------------ the commands the pages show
def block_lines(page: Path) -> list[str]:
    """The lines of the page's code blocks (fenced or indented; a trailing backslash joins a line to the next), and
    the commands in the first cell of its tables (docs/benchmarks.md's)."""
    text = page.read_text(encoding="utf-8")
    lines = [line for block in FENCE.findall(text) for line in block.replace("\\\n", " ").splitlines()[1:-1]]
    rest = FENCE.sub("", text).replace("\\\n", " ").splitlines()
    lines += [line for line in rest if line.startswith("    ") and not line.lstrip().startswith(("-", "*", "|"))]
    return lines + [cell for line in rest for cell in re.findall(r"^\| `([^`]+)`", line)]


def code_spans(page: Path) -> list[str]:
    """Every piece of code on the page: its blocks' lines and its inline `code`."""
    return block_lines(page) + re.findall(r"`([^`\n]+)`", FENCE.sub("", page.read_text(encoding="utf-8")))


ECPO_COMMAND = re.compile(r"(?:^\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?ecpo|ecpo_train\.apps\.cli) +([a-z]+)"
                          r"((?: (?!#)[^;&|>#]*)?)")


def test_every_ecpo_command_the_pages_show_exists():
    """`ecpo VERB ...` (or `.venv/bin/ecpo`, `-m ecpo_train.apps.cli`): the verb, each `--option`, each `key=value`
    override's key (train, sft, demo), each `--config` preset and `--manifest` name."""
    import typer

    from ecpo_train.apps.cli import app
    from ecpo_train.runtime.config import TrainConfig

    verbs = typer.main.get_command(app).commands
    keys = {item.name for item in dataclasses.fields(TrainConfig)}
    wrong, seen = [], 0
    for page in COMMAND_PAGES:
        for line in code_spans(page):
            for match in ECPO_COMMAND.finditer(line):
                seen += 1
                verb, words = match.group(1), match.group(2).split()
                where = f"{page.relative_to(ROOT)}: {line.strip()[:100]}"
                command = verbs.get(verb)
                if hasattr(command, "commands"):  # a group (`ecpo models`): its sub-verb
                    command = command.commands.get(words.pop(0)) if words else None
                if command is None:
                    wrong.append(f"{where} (no such verb)")
                    continue
                options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
                for k, word in enumerate(words):
                    value = words[k + 1] if k + 1 < len(words) else ""
                    if word.startswith("--") and word.split("=")[0] not in options:
                        wrong.append(f"{where} ({word.split('=')[0]})")
                    elif verb in ("train", "sft", "demo") and re.match(r"[a-z_][a-z0-9_.]*=", word) \
                            and word.split("=")[0].split(".")[0] not in keys:
                        wrong.append(f"{where} (key {word.split('=')[0]})")
                    elif word == "--config" and re.fullmatch(r"[a-z0-9_]+", value) \
                            and not (ROOT / "ecpo_train" / "runtime" / "configs" / f"{value}.yaml").is_file():
                        wrong.append(f"{where} (preset {value})")
                    elif word == "--manifest" and re.fullmatch(r"[a-z0-9_]+", value) \
                            and not (ROOT / "ecpo_train" / "manifests" / f"{value}.json").is_file():
                        wrong.append(f"{where} (manifest {value})")
    assert wrong == [], "\n".join(wrong)
    assert seen > 100  # the pattern still finds the commands


def program_source(folder: str, name: str, seen: set[str] | None = None) -> str:
    """The source of ``FOLDER/NAME.py`` (``benchmarks`` or ``scripts``) and of the modules of that folder it
    imports (where its options may be declared)."""
    seen = set() if seen is None else seen
    path = ROOT / folder / f"{name}.py"
    if name in seen or not path.is_file():
        return ""
    seen.add(name)
    text = path.read_text(encoding="utf-8")
    if folder == "benchmarks":
        imported = re.findall(r"^from benchmarks\.(\w+) import", text, re.MULTILINE) + ["__init__"] + [
            item.strip() for names in re.findall(r"^from benchmarks import \(?([\w, \n]+)\)?", text, re.MULTILINE)
            for item in names.split(",")]
    else:  # scripts import each other by name
        imported = re.findall(r"^(?:from (\w+) import|import (\w+))", text, re.MULTILINE)
        imported = [module for pair in imported for module in pair if module]
    return text + "".join(program_source(folder, module, seen) for module in imported)


PROGRAM = re.compile(r"python3? (?:-m benchmarks\.(\w+)|scripts/(\w+)\.py)([^#;&>]*)")


def test_every_program_command_the_pages_show_exists():
    """`python -m benchmarks.NAME [STAGE] [--option ...]` and `python scripts/NAME.py [STEP] [--option ...]` in a
    code block or a command table: the program exists and declares the stage and every option (finished one-offs
    are quoted in prose, with the commit that holds them)."""
    wrong, seen = [], 0
    for page in COMMAND_PAGES:
        for line in block_lines(page):
            for benchmark, script, rest in PROGRAM.findall(line.replace("\\|", "/")):
                seen += 1
                where = f"{page.relative_to(ROOT)}: {line.strip()[:100]}"
                folder, name = ("benchmarks", benchmark) if benchmark else ("scripts", script)
                source = program_source(folder, name)
                if not source:
                    wrong.append(f"{where} (no program {folder}/{name}.py)")
                    continue
                words = rest.split()
                stages = words[0].split("/") if words and re.fullmatch(r"[a-z][a-z_/-]*", words[0]) else []
                for word in stages + re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest):
                    if f'"{word}"' not in source and f"'{word}'" not in source:
                        wrong.append(f"{where} ({word})")
    assert wrong == [], "\n".join(wrong)
    assert seen > 40  # the pattern still finds the commands


def test_every_test_the_pages_name_exists():
    """`tests/FILE.py` and `tests/FILE.py::name` (a test function) exist; docs/run_shell_counts.md is left out: it
    records a refactor, naming the test files it moved away."""
    wrong = []
    for page in COMMAND_PAGES:
        if page.name == "run_shell_counts.md":
            continue
        for file, name in re.findall(r"(tests/\w+\.py)(?:::(\w+))?", page.read_text(encoding="utf-8")):
            path = ROOT / file
            if not path.is_file() or name and not re.search(rf"^\s*def {name}\(", path.read_text(), re.MULTILINE):
                wrong.append(f"{page.relative_to(ROOT)}: {file}{'::' + name if name else ''}")
    assert wrong == [], "\n".join(wrong)
