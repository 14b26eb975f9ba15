"""Imports point down the layers (docs/ARCHITECTURE.md), read from the source's import graph, nested imports included."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# lowest first; packages on one rank are peers that must not import each other
RANKS = [("ecpo_gym",), ("ecpo_train.files",), ("ecpo_train.policies",), ("ecpo_train.core",), ("ecpo_train.runtime",),
         ("ecpo_train.evaluation", "ecpo_train.integrations"), ("ecpo_train.apps",),
         ("ecpo_train.credit", "ecpo_train.rllib", "ecpo_train")]  # the public facade over everything


def _layer(module: str) -> tuple[int, str]:
    best = max((name for rank in RANKS for name in rank if module == name or module.startswith(name + ".")), key=len)
    return next(i for i, rank in enumerate(RANKS) if best in rank), best


def _modules():
    for package in ("ecpo_gym", "ecpo_train"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            yield name, path


def _imports(path: Path, name: str):
    for node in ast.walk(ast.parse(path.read_text())):
        yield from _targets(node, path, name)


def _targets(node: ast.AST, path: Path, name: str) -> list[str]:
    """The modules one import statement names (``from p import x``: ``p``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:  # relative: resolve against this module's package (a package's __init__ is its own)
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            base = package[: len(package) - node.level + 1]
            return [".".join(base + ([node.module] if node.module else []))]
        if node.module:
            return [node.module]
    return []


def _upward_imports():
    bad = []
    for name, path in _modules():
        rank, package = _layer(name)
        for target in _imports(path, name):
            if not target.split(".")[0] in ("ecpo_gym", "ecpo_train"):
                continue
            target_rank, target_package = _layer(target)
            if target_rank > rank or (target_rank == rank and target_package != package):
                bad.append(f"{name} imports {target} ({package} -> {target_package})")
    return bad


def test_no_module_imports_up_the_layers():
    assert _upward_imports() == []


def test_the_check_sees_nested_and_peer_imports(tmp_path, monkeypatch):
    # the graph is read from nested imports too: a function-level import of the CLI layer is caught
    assert _layer("ecpo_train.policies.llm") < _layer("ecpo_train.apps.models")
    source = "def f():\n    from ecpo_train.apps.models import DEMO_MODEL\n    import ecpo_train.integrations.verl_agent\n"
    path = tmp_path / "m.py"
    path.write_text(source)
    assert list(_imports(path, "ecpo_train.evaluation.m")) == ["ecpo_train.apps.models", "ecpo_train.integrations.verl_agent"]


def test_architecture_page_lists_every_trainer_module():
    # (ecpo_gym is listed family by family, as folders)
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    missing = [str(path.relative_to(ROOT)) for name, path in _modules()
               if name.startswith("ecpo_train") and path.name != "__init__.py" and path.name not in page]
    assert missing == []


# every folder of the checkout that holds Python besides tests/; scripts/ and examples/ are not packages: their
# files import each other by bare name, as they do when run
CHECKED = ("benchmarks", "ecpo_gym", "ecpo_train", "examples", "scripts")


def _module_graph(tops: tuple[str, ...] = CHECKED, root: Path = ROOT) -> dict[str, set[str]]:
    """Every module under ``tops`` -> the modules among them it imports, nested imports included (``from p
    import m`` imports the module ``p.m`` where there is one; a module's own packages, which Python imports
    first anyway, are not counted)."""
    modules = {}
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            modules[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = path
    by_bare_name = {name.rpartition(".")[2]: name for name, path in modules.items()
                    if not (root / name.split(".")[0] / "__init__.py").exists()}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            for base in _targets(node, path, name):
                base = base if base in modules else by_bare_name.get(base, base)
                submodules = [f"{base}.{alias.name}" for alias in getattr(node, "names", [])
                              if isinstance(node, ast.ImportFrom) and f"{base}.{alias.name}" in modules]
                targets |= set(submodules) or {base}
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                graph.setdefault(name, set()).add(target)
        graph.setdefault(name, set())
    return graph


def _import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan): each holds a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle_of_any_length():
    # modules that import each other, through any number of others, are one job in several files, or a rule
    # split between them: split by job, never by size
    assert _import_cycles(_module_graph()) == []


def test_the_cycle_check_sees_a_cycle_of_three_and_scripts_by_bare_name(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    import pkg.c\n")
    (tmp_path / "pkg" / "c.py").write_text("from . import a\nimport pkg\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "one.py").write_text("import two\n")
    (tmp_path / "scripts" / "two.py").write_text("from one import x\n")
    graph = _module_graph(("pkg", "scripts"), tmp_path)
    assert _import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"], ["scripts.one", "scripts.two"]]


def test_the_graph_sees_a_pair_through_a_package_import(tmp_path):
    path = tmp_path / "step.py"
    path.write_text("def f():\n    from ecpo_train.integrations.rllib.llm import pipeline\n")
    (node,) = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)]
    assert _targets(node, path, "ecpo_train.integrations.rllib.llm.step") == ["ecpo_train.integrations.rllib.llm"]


def test_the_library_imports_nothing_of_the_checkouts_benchmarks():
    # wheels ship ecpo_gym and ecpo_train only: `ecpo bench` runs `python -m benchmarks.NAME` instead
    found = [f"{name} imports {target}" for name, path in _modules() for target in _imports(path, name)
             if target == "benchmarks" or target.startswith("benchmarks.")]
    assert found == []


def test_benchmarks_use_the_library_not_its_command_line():
    # what a benchmark needs from the library (the warm start, the model cache) lives below the `ecpo` command
    found = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        name = f"benchmarks.{path.stem}"
        found += [f"{name} imports {target}" for target in _imports(path, name)
                  if target == "ecpo_train.apps" or target.startswith("ecpo_train.apps.")]
    assert found == []


def test_importing_ecpo_train_does_not_import_ray():
    # ecpo_train.integrations.rllib imports ray; the package root and the credit core must not
    code = "import sys, ecpo_train, ecpo_train.credit; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
