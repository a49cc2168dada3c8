"""Layers import one way: no module of semiparam imports a higher layer, and benchmark scripts use
the public API only.

Layers, lowest first: ``_config``/``_io`` -> ``data`` -> ``nn`` -> ``models`` -> ``training`` ->
``estimators``/``np``/``genomics`` -> ``bench``/``cli``. Every import counts: module level, inside a
function (lazy), under ``if TYPE_CHECKING``; relative imports are resolved to absolute names. The
checks parse the source with ``ast``; nothing is imported.

Beyond the ranks: no module imports a private module or name (``_x``) of another part, genomics never
imports ``training`` (it trains through the public learner layer, ``estimators.learner``), the
harness (``bench``) imports no ``training`` and ``tuning`` no ``bench``, nothing is re-exported
through ``import_module`` (but the package's own lazy ``__init__``), no two modules import each
other around a loop (``cli/`` included), and benchmark scripts import public modules and names only.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = SRC / "semiparam"
BENCHMARKS = REPO / "benchmarks"

# Rank of each part of the package; a module may import only parts of its own rank or lower.
LAYERS: dict[str, int] = {
    "semiparam._config": 0,
    "semiparam._io": 0,
    "semiparam._measure": 0,
    "semiparam._provenance": 0,  # machine_info, code_hash: where a measured number came from
    "semiparam.parallel": 0,  # map_tasks: serial or Ray; imports nothing of the package
    "semiparam.data": 1,
    "semiparam.datasets": 1,  # the public face of semiparam.data.datasets
    "semiparam.nn": 2,
    "semiparam.models": 3,
    "semiparam.training": 4,
    "semiparam.estimators": 5,
    "semiparam.neural_processes": 5,
    "semiparam.np": 5,  # the deprecated alias of semiparam.neural_processes
    "semiparam.genomics": 5,
    "semiparam.pretraining": 5,  # the prior-fitted NPT's pretraining and weights export
    "semiparam": 5,  # the package's __init__: the public estimators, models and configs
    "semiparam.bench": 6,
    "semiparam.cli": 6,
    "semiparam.__main__": 6,  # python -m semiparam: the command line
    "semiparam.tuning": 6,  # searches over the estimators; reads configs as the CLI does
}

# What scripts outside the package may import (and public submodules of semiparam.bench).
BENCHMARK_API = {
    "semiparam",
    "semiparam.datasets",
    "semiparam.bench",
    "semiparam.genomics",
    "semiparam.neural_processes",
    "semiparam.cli.main",
    "semiparam.tuning",
    "semiparam.parallel",
    "semiparam.pretraining",
    # the pieces a step-level benchmark (step_cost.py, images.py) drives directly, from their homes
    "semiparam.models.registry",
    "semiparam.training.masking",
    "semiparam.training.trainer",
}


def _module_name(path: Path) -> tuple[str, bool]:
    """``(dotted name, is_package)`` of a source file under src/."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def _package_modules() -> dict[str, tuple[Path, bool]]:
    return {_module_name(p)[0]: (p, _module_name(p)[1]) for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _package_modules()


def import_source(node: ast.ImportFrom, module: str = "", is_package: bool = False) -> str:
    """The absolute name of the module that ``from X import ...`` in ``module`` reads from."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level - 1 > len(base) - 1:
        raise AssertionError(f"{module}:{node.lineno}: relative import beyond the package")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(source: str, module: str = "", is_package: bool = False) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``source``, at any depth.

    ``from X import a`` names ``X.a`` when that is a module of the package, else ``X``.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = import_source(node, module, is_package)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if sub in MODULES else target))
    return sorted(set(found))


def layer_of(name: str) -> str | None:
    """The part of the package (a key of LAYERS) that module ``name`` belongs to."""
    parts = name.split(".")
    if parts[0] != "semiparam":
        return None
    key = ".".join(parts[:2])
    return key if key in LAYERS else "semiparam"


def layering_violations(module: str, is_package: bool, source: str, where: str) -> list[str]:
    """One line per import of ``module`` that reaches a higher layer."""
    own = layer_of(module)
    assert own is not None
    out = []
    for line, name in imports(source, module, is_package):
        other = layer_of(name)
        if other is not None and LAYERS[other] > LAYERS[own]:
            out.append(
                f"{module} ({where}:{line}) imports {name}: layer {own} (rank {LAYERS[own]}) may not "
                f"import layer {other} (rank {LAYERS[other]})"
            )
    return out


def benchmark_violations(source: str, where: str) -> list[str]:
    """One line per use of something other than the public API in a benchmark script: a module
    outside it, a private name imported, a private attribute of another object."""
    out = []
    for line, name in imports(source):
        if not name.startswith("semiparam"):
            continue
        parts = name.split(".")
        bench_module = parts[:2] == ["semiparam", "bench"] and not any(p.startswith("_") for p in parts)
        if name not in BENCHMARK_API and not bench_module:
            out.append(f"{where}:{line} imports {name}, which is not the public API {sorted(BENCHMARK_API)}")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("semiparam"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{where}:{node.lineno} imports the private {alias.name} of {node.module}")
        # a private attribute of another object (a fitted estimator's _encode, ...); PyTorch's own
        # operator names (torch.ops.aten._scaled_dot_product_...) are PyTorch's public spelling
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and ast.unparse(node.value) not in ("self", "cls")
            and not ast.unparse(node.value).endswith("aten")
        ):
            out.append(f"{where}:{node.lineno} uses the private {ast.unparse(node.value)}.{node.attr}")
    return out


# Pairs (importer's part, imported part) that may never meet, whatever their ranks.
FORBIDDEN = {
    # genomics trains and predicts through the public learner layer (estimators.learner)
    ("semiparam.genomics", "semiparam.training"),
    # the benchmark harness drives the public estimators and re-exports no training internals
    ("semiparam.bench", "semiparam.training"),
    # the search reads its provenance from semiparam._provenance, not from the harness
    ("semiparam.tuning", "semiparam.bench"),
}


def rule_violations(module: str, is_package: bool, source: str, where: str) -> list[str]:
    """One line per import of ``module`` that breaks a rule beyond the layers: a private module
    (``_name``) of another part of the package (the package's own ``semiparam._config``,
    ``_io``, ``_measure`` and ``_provenance`` are shared by all), a private name from another part
    (relative or absolute import), a ``FORBIDDEN`` pair, or a name re-exported through
    ``importlib.import_module`` (hidden from these checks) outside the package's own ``__init__``."""
    own = layer_of(module)
    out = []
    tree = ast.parse(source)
    for line, name in imports(source, module, is_package):
        other = layer_of(name)
        if other is None or other == own:
            continue
        parts = name.split(".")
        if any(p.startswith("_") and not p.startswith("__") for p in parts[2:]):
            out.append(f"{module} ({where}:{line}) imports the private module {name} of {other}")
        if (own, other) in FORBIDDEN:
            out.append(f"{module} ({where}:{line}) imports {name}: {own} may not import {other}")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = import_source(node, module, is_package)
            if layer_of(target) not in (None, own):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        out.append(
                            f"{module} ({where}:{node.lineno}) imports the private {alias.name} of {target}"
                        )
        if module != "semiparam" and (
            (isinstance(node, ast.ImportFrom) and any(a.name == "import_module" for a in node.names))
            or (isinstance(node, ast.Attribute) and node.attr == "import_module")
        ):
            out.append(f"{module} ({where}:{node.lineno}) imports through import_module")
    return out


def test_the_rules_beyond_the_layers_hold() -> None:
    problems = []
    for module, (path, is_package) in MODULES.items():
        problems += rule_violations(module, is_package, path.read_text(), str(path.relative_to(REPO)))
    assert not problems, "\n".join(problems)


def test_the_rule_checks_catch_violations() -> None:
    source = (
        "from ..estimators._ensemble import EnsembleLearner\n"
        "from ..estimators.explain import _private_helper\n"
        "from ..training.trainer import Trainer\n"
        "from .._config import ConfigError\n"
        "from importlib import import_module\n"
        "from semiparam.estimators.explain import _absolute_private\n"
    )
    found = rule_violations("semiparam.genomics.x", False, source, "x.py")
    assert len(found) == 5, found
    assert any("private _absolute_private" in f for f in found)
    tuning = rule_violations("semiparam.tuning", False, "from .bench.measure import code_hash\n", "t.py")
    assert len(tuning) == 1 and "semiparam.tuning may not import semiparam.bench" in tuning[0], tuning
    assert "private module semiparam.estimators._ensemble" in found[0]
    assert any("private _private_helper" in f for f in found)
    assert any("may not import semiparam.training" in f for f in found)
    assert sum("import_module" in f for f in found) == 1


def test_every_module_has_a_layer() -> None:
    unknown = [m for m in MODULES if m != "semiparam" and ".".join(m.split(".")[:2]) not in LAYERS]
    assert not unknown, f"modules outside every layer (add their package to LAYERS): {unknown}"


def test_no_module_imports_a_higher_layer() -> None:
    problems = []
    for module, (path, is_package) in MODULES.items():
        where = str(path.relative_to(REPO))
        problems += layering_violations(module, is_package, path.read_text(), where)
    assert not problems, "upward imports:\n" + "\n".join(problems)


def test_package_imports_have_no_cycle() -> None:
    """Parts of the same rank may import each other, but only one way."""
    edges: dict[str, set[str]] = {key: set() for key in LAYERS}
    for module, (path, is_package) in MODULES.items():
        own = layer_of(module)
        for _, name in imports(path.read_text(), module, is_package):
            other = layer_of(name)
            if other is not None and other != own:
                edges[own].add(other)
    cycles = []
    for start in edges:
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(edges[node]):
                if nxt == start:
                    cycles.append(" -> ".join([*trail, nxt]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_benchmarks_import_the_public_api_only() -> None:
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert scripts
    problems = []
    for path in scripts:
        problems += benchmark_violations(path.read_text(), str(path.relative_to(REPO)))
    assert not problems, "benchmark imports of internal modules:\n" + "\n".join(problems)


def test_the_checks_catch_violations() -> None:
    """The checker itself: lazy, relative and absolute upward imports are all reported."""
    source = (
        "from ..nn.columns import ColumnEmbedding\n"
        "def f():\n"
        "    from semiparam.training import trainer\n"
        "    import semiparam.bench.runner\n"
        "from .columns import ColumnLayout\n"
        "from .. import _config\n"
    )
    found = layering_violations("semiparam.data.table", False, source, "x.py")
    assert [v.split(" imports ")[1].split(":")[0] for v in found] == [
        "semiparam.nn.columns",
        "semiparam.training.trainer",
        "semiparam.bench.runner",
    ], found
    assert "semiparam.data.table (x.py:1) imports semiparam.nn.columns" in found[0]
    script = (
        "from semiparam import NPTClassifier\n"
        "from semiparam.bench.measure import measure\n"
        "def g():\n"
        "    from semiparam.data.vcf import read_vcf\n"
        "    from semiparam.estimators._ensemble import EnsembleLearner\n"
        "    from semiparam import nn\n"
        "from semiparam.bench.measure import _package_root\n"
        "clf._encode(X)\n"
    )
    found = benchmark_violations(script, "b.py")
    assert [v.split(" imports ")[1].split(",")[0] for v in found[:4]] == [
        "semiparam.data.vcf",
        "semiparam.estimators._ensemble",
        "semiparam.nn",
        "the private _package_root of semiparam.bench.measure",
    ], found[:4]
    assert found[4:] == ["b.py:8 uses the private clf._encode"], found


def module_cycles(modules: dict[str, tuple[Path, bool]]) -> list[str]:
    """Import cycles between single modules (any import, at any depth), each named once."""
    edges = {m: set() for m in modules}
    for module, (path, is_package) in modules.items():
        for _, name in imports(path.read_text(), module, is_package):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                edges[module].add(name)
    cycles = set()
    for start in edges:
        stack = [(start, (start,))]
        while stack:
            node, trail = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    i = trail.index(min(trail))
                    cycles.add(" -> ".join(trail[i:] + trail[:i] + (min(trail),)))
                elif nxt not in trail and nxt > start:  # each cycle found from its smallest module
                    stack.append((nxt, (*trail, nxt)))
    return sorted(cycles)


def test_modules_import_each_other_one_way() -> None:
    """No two modules import each other, directly or around a loop, even within one package:
    ``cli.main`` builds the parser from the other command modules, which share ``cli.common`` and
    never import ``cli.main`` back."""
    cycles = module_cycles(MODULES)
    assert not cycles, "import cycles between modules:\n" + "\n".join(cycles)


def test_the_package_init_hides_no_import() -> None:
    """The one ``import_module`` allowed, the package's lazy ``__init__``, names every module it loads
    in plain imports under ``if TYPE_CHECKING`` too, so that the checks above see each of them."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    lazy: set[tuple[str, str]] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_EXPORTS" for t in node.targets):
            lazy = {(module, name) for name, module in ast.literal_eval(node.value).items()}
    seen = {
        ("." * node.level + (node.module or ""), alias.name)
        for block in tree.body
        if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING"
        for node in ast.walk(block)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert lazy, "semiparam/__init__.py: no _EXPORTS table found"
    assert lazy <= seen, f"lazy exports without a plain import under TYPE_CHECKING: {sorted(lazy - seen)}"
