"""The package's house (issues #15, #36, #56): one straight line from the marker to the report, no module
importing one above it, every stage a module by its name, runner only orchestrating, no module over 400 lines, at
most 12 modules at the package's root; the concerns that span several modules in subpackages (folders) whose
``__init__`` is a docstring and nothing else, and whose private names stay inside them.

Two maps hold the imports, both drawn in docs/architecture.md. The folders and the root's modules are the layers
of pyproject.toml's import-linter contract (``[tool.importlinter]``), which ``lint-imports`` checks. Within them,
``LAYERS`` below places every module, by dotted module name (``memory.cost`` is ``pytest_export/memory/cost.py``;
a subpackage's ``__init__`` is its name), folder by folder in the contract's order, from the bottom up. A module may
import only modules of a lower layer (lazy imports inside functions count too); a new module must be placed in a
layer here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import pytest_export
from pytest_export.declare.options import ORDER

ROOT = Path(pytest_export.__file__).parent
STAGE_MODULES = [f"stages.{name}" for name in ORDER]
# ``stages/__init__`` is the registry, not a docstring
SUBPACKAGES = ["torchside", "declare", "memory", "proof", "gate", "probes", "runtimes", "explain", "repro", "report"]

LAYERS: list[list[str]] = [
    # the subpackages' __init__: a docstring each, no imports
    SUBPACKAGES,
    # util: helpers every layer shares, HarnessError
    ["util"],
    # torchside/, the ground floor: the module's state, ATen ops, time limits, torch's logs, training mode, the
    # model's frames of a failure; then how values compare; then one observed forward call
    ["torchside.modstate", "torchside.ops", "torchside.timeout", "torchside.torchlog", "torchside.training",
     "torchside.frames", "torchside.leftovers"],
    ["torchside.compare"],
    ["torchside.observe"],
    # declare/: option values parsed, the reproduce= blob; the options and keywords; the case, tags, modes and
    # devices; the declaration (what was promised) and the session's settings
    ["declare.values", "declare.blob"],
    ["declare.options"],
    ["declare.case", "declare.tags", "declare.variants"],
    ["declare.shapes", "declare.settings"],
    # memory/, the cost and memory model: what fused kernels cost beyond the tensors they return, the ops the count
    # cannot see into and the memory guard, how far each declared dim was checked; what a forward makes, counted;
    # what a probe costs (time, memory, the budget's ledger); one case's costing, calibrated on the example
    ["memory.kernels", "memory.opaque", "memory.coverage"],
    ["memory.count"],
    ["memory.cost"],
    ["memory.calibration"],
    # the one result model
    ["results"],
    # proof/: one-symbol guards in closed form, where torch recorded each guard; guards decided over a box; the
    # program's guards mapped onto the declared dims, and the narrowings they accept
    ["proof.closed", "proof.guardsource"],
    ["proof.solver"],
    ["proof.prove", "proof.narrow"],
    # gate/: what makes two failures the same, a run's scope, its verdicts; the baseline; the judge
    ["gate.signature", "gate.scope", "gate.verdicts"],
    ["gate.baseline"],
    ["gate.judge"],
    # what export kept of the declaration; the case context that stages share
    ["audit"],
    ["context"],
    # probes/, the choice of what runs: strategies and inputs; a probe's inputs and the verdicts' vocabulary; how a
    # probe is planned and runs; which sizes to probe
    ["probes.strategies"],
    ["probes.sized"],
    ["probes.sizing"],
    ["probes.choose"],
    # runtimes/: a runtime's memory plan held to the cap, work in a forked child held to the cap; ExecuTorch's
    # lowering read for findings, and planned; a runtime against eager
    ["runtimes.memory", "runtimes.forked"],
    ["runtimes.lowering", "runtimes.checks"],
    # explain/: a fix that keeps the promise; a failed export diagnosed, why a program refuses an in-range probe
    # (and the audit rows it marks), the declaration a failing program really accepts, checked before it is offered
    ["explain.cause", "explain.promise"],
    ["explain.diagnose", "explain.refusal", "explain.fixes"],
    # the stages, one module each, and their registry
    STAGE_MODULES,
    ["stages"],
    # repro/: the repro script's text and its checks; the Python it renders; what goes in, written
    ["repro.script", "repro.checks"],
    ["repro.source"],
    ["repro.write"],
    # orchestration and the plain-Python entry point
    ["runner"],
    ["api"],
    # report/: the conformance table, the report's schema, the stage a case is in; text summaries; the one writer
    # of files; the controller's report of a run
    ["report.conformance", "report.schema", "report.progress"],
    ["report.summary"],
    ["report.files"],
    ["report.run"],
    # pytest: the session plugin object, marked items, the hooks; the command line
    ["session"],
    ["items"],
    ["plugin", "__main__"],
    ["__init__"],
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1] or ["__init__"]
        out[".".join(parts)] = path
    return out


def _package_of(name: str, path: Path) -> list[str]:
    """The package a module's relative imports start from: its own for an ``__init__``, else its parent's."""
    if name == "__init__":
        return []
    return name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]


def _bound(name: str, path: Path, tree: ast.AST) -> list[tuple[str, ast.alias, bool]]:
    """Each package import of a module: (the package module it names, the alias, whether the alias is that module
    itself or a name taken from it). ``from .gate import baseline`` names the module ``gate.baseline``, not ``gate``."""
    modules = _modules()
    package = _package_of(name, path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            elif node.module == "pytest_export" or (node.module or "").startswith("pytest_export."):
                base = node.module.split(".")[1:]
            else:
                continue
            for a in node.names:
                sub = ".".join(base + [a.name])
                out.append((sub, a, True) if sub in modules else (".".join(base) or "__init__", a, False))
        elif isinstance(node, ast.Import):
            out += [(a.name.removeprefix("pytest_export."), a, True) for a in node.names
                    if a.name.startswith("pytest_export.")]
    return out


def _imports(name: str, path: Path) -> set[str]:
    """Package modules ``name`` imports anywhere in its file (relative or absolute, top level or lazy)."""
    return {m for m, _, _ in _bound(name, path, ast.parse(path.read_text())) if m != name}


def test_every_module_has_a_layer():
    placed = [m for layer in LAYERS for m in layer]
    assert len(placed) == len(set(placed)), "a module is placed twice"
    missing = sorted(set(_modules()) - set(placed))
    assert not missing, f"place these modules in a layer of tests/test_architecture.py: {missing}"


def test_no_module_imports_one_above_it():
    layer_of = {m: i for i, layer in enumerate(LAYERS) for m in layer}
    wrong = []
    for name, path in _modules().items():
        for dep in sorted(_imports(name, path)):
            dep = dep if dep in layer_of else dep.rsplit(".", 1)[0]  # `from .stages import x` names a module
            if dep in layer_of and layer_of[dep] >= layer_of[name]:
                wrong.append(f"{name} (layer {layer_of[name]}) imports {dep} (layer {layer_of[dep]})")
    assert not wrong, "\n".join(wrong)


def test_no_module_reaches_into_another_modules_private_names():
    wrong = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("pytest_export")):
                wrong += [f"{name}: from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not wrong, "\n".join(wrong)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _subpackage(module: str) -> str | None:
    top = module.split(".")[0]
    return top if top in SUBPACKAGES else None


def test_every_subpackage_is_a_docstring_that_names_its_modules_and_imports_nothing():
    """A subpackage's ``__init__`` says what each of its modules owns and what they may import, and imports
    nothing: importing a low module of it (``probes.cost``) runs no higher one."""
    found = sorted(".".join(p.parent.relative_to(ROOT).parts) for p in ROOT.rglob("*/__init__.py"))
    assert found == sorted([*SUBPACKAGES, "stages"]), "a new subpackage goes in SUBPACKAGES"
    wrong = []
    for package in SUBPACKAGES:
        body = ast.parse((ROOT / package / "__init__.py").read_text()).body
        doc = ast.get_docstring(ast.Module(body=body[:1], type_ignores=[])) if body else None
        if not doc or len(body) != 1:
            wrong.append(f"{package}/__init__.py: a docstring and nothing else")
            continue
        modules = [m.split(".")[1] for m in _modules() if m.startswith(package + ".")]
        wrong += [f"{package}/__init__.py does not say what ``{m}`` owns" for m in modules if f"``{m}``" not in doc]
    assert not wrong, "\n".join(wrong)


def test_no_module_outside_a_subpackage_reaches_its_private_names():
    """A subpackage's private names (its ``_x`` modules, and the ``_x`` names of its modules) are its own: no module
    outside it imports them, nor reaches them as attributes of a module it imported (``from .gate import judge``
    then ``judge._x``; ``import pytest_export.gate.judge as j`` then ``j._x``; ``pytest_export.gate.judge._x``)."""
    wrong = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        outside = lambda module: _subpackage(module) not in (None, _subpackage(name))  # noqa: E731
        local: dict[str, str] = {}  # a name bound to a module of a subpackage -> that module
        for module, alias, is_module in _bound(name, path, tree):
            if not outside(module):
                continue
            parts = module.split(".") + ([] if is_module else [alias.name])
            if any(_private(p) for p in parts):
                wrong.append(f"{name} imports {'.'.join(parts)}")
            if is_module and (alias.asname or "." not in alias.name):
                local[alias.asname or alias.name] = module
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if not isinstance(value, ast.Name):
                continue
            if value.id == "pytest_export":
                module = ".".join(reversed(chain))
            else:
                module = ".".join([local.get(value.id, ""), *reversed(chain)]).strip(".")
            if value.id in local or value.id == "pytest_export":
                if module and outside(module):
                    wrong.append(f"{name} reaches {module}.{node.attr}")
    assert not wrong, "\n".join(wrong)


def test_the_layers_contract_holds():
    """``lint-imports`` (import-linter, of the ``[dev]`` extra) keeps pyproject.toml's layers contract: no folder or
    root module imports one of a layer above it, none imports a sibling of its own row, and every one is placed."""
    exe = Path(sys.executable).with_name("lint-imports")
    assert exe.exists(), f"{exe} is missing: install the [dev] extra (it holds import-linter)"
    proc = subprocess.run([str(exe), "--no-cache", "--no-logo"], cwd=ROOT.parent, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout, proc.stdout[-4000:]


def test_the_package_root_keeps_the_pytest_face_and_the_spine():
    """At most 12 modules directly in ``pytest_export/`` (``__init__`` and ``__main__`` counted): a concern of
    several modules gets a folder of its own."""
    root = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(root) <= 12, root


def test_every_stage_is_a_module_by_its_name_in_one_order():
    from pytest_export.declare.options import STAGES
    from pytest_export.stages import REGISTRY

    assert [s.name for s in REGISTRY] == list(ORDER) == ["eager", *STAGES]
    for name in ORDER:
        assert (ROOT / "stages" / f"{name}.py").exists(), name


def test_module_sizes():
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert sizes["runner"] < 200, sizes["runner"]
    big = {n: s for n, s in sizes.items() if s > 400}
    assert not big, big


@pytest.mark.slow
def test_every_module_imports_on_its_own():
    """Each module in a fresh interpreter: nothing depends on another module having been imported first."""
    names = sorted(_modules())

    def load(name: str) -> tuple[str, int, str]:
        module = "pytest_export" if name == "__init__" else f"pytest_export.{name}"
        proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                              timeout=300)
        return name, proc.returncode, proc.stderr[-2000:]

    with ThreadPoolExecutor(max_workers=2) as pool:
        failed = [r for r in pool.map(load, names) if r[1] != 0]
    assert not failed, "\n\n".join(f"{n}:\n{err}" for n, _, err in failed)


def test_the_readme_stage_example_runs(tmp_path):
    """The "Adding a stage" example of docs/architecture.md is a working stage."""
    import re
    import types

    import torch

    from pytest_export.context import Context
    from pytest_export.declare.case import Case
    from pytest_export.declare.options import CaseOptions
    from pytest_export.runner import _run_stage
    from pytest_export.stages import REGISTRY

    page = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    code = re.search(r"\n## Adding a stage\n.*?```python\n(.*?)```", page, re.S).group(1)
    module = types.ModuleType("pytest_export.stages.repeat")
    module.__package__ = "pytest_export.stages"
    exec(compile(code, "docs/architecture.md", "exec"), module.__dict__)
    ctx = Context(Case.build("x", torch.nn.Linear(3, 2), (torch.randn(4, 3),), None), CaseOptions(), "x", tmp_path)
    for stage in REGISTRY[:2]:  # eager, export
        ctx.result.add(_run_stage(ctx, stage, [0.0]))
    out = _run_stage(ctx, module.STAGE, [0.0])
    assert (out.name, out.status, out.message) == ("repeat", "passed", "two calls agree")
