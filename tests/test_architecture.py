"""The package's house (issue #15): one straight line from the marker to the report, no module importing one above
it, every stage a module by its name, runner only orchestrating, no module over 400 lines.

The layers below are the map docs/architecture.md draws. A module may import only modules of a lower layer (lazy
imports inside functions count too); a new module must be placed in a layer here.
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

LAYERS: list[list[str]] = [
    # the subpackages: a docstring each, no imports
    ["repro", "probes", "gate", "declare", "explain", "report"],
    # plain helpers and torch glue with no package imports
    ["util", "modstate", "ops", "timeout", "torchlog", "probes.cost", "explain.frames", "training", "repro.script", "repro.checks"],
    # the vocabulary: options and keywords, the result model, a run's scope, draft-export diagnosis
    ["declare.options", "results", "gate.scope", "explain.diagnose", "explain.guardsource", "gate.verdicts", "repro.source"],
    ["explain.refusal"],
    # the case and how values compare; the CI-side data (baseline, tags, variants, conformance)
    ["declare.case", "compare", "gate.baseline", "tags", "variants", "report.conformance"],
    # the declaration, one observed forward call, session settings, the gate, text summaries
    ["declare.shapes", "observe", "declare.settings", "gate.judge", "report.summary", "report.progress"],
    ["audit", "report.files", "probes.calibration"],
    # what stages share
    ["probes.strategies", "context"],
    ["probes.sizing"],
    ["probes.choose"],
    # the declaration a failing program really accepts, checked before it is offered; a runtime against eager
    ["explain.fixes", "runtimes"],
    # the stages, one module each, and their registry
    STAGE_MODULES,
    ["stages"],
    # orchestration and the plain-Python entry point
    ["runner", "repro.write"],
    ["api"],
    # pytest: the session plugin object, marked items, the hooks
    ["report.run"],
    ["session"],
    ["items"],
    ["plugin"],
    ["__main__", "__init__"],
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1] or ["__init__"]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path) -> set[str]:
    """Package modules ``name`` imports anywhere in its file (relative or absolute, top level or lazy)."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == "__init__":
        package = []
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                if node.module:
                    found.add(".".join(base + node.module.split(".")) or "__init__")
                else:
                    found.update(".".join(base + [a.name]) for a in node.names)
            elif node.module and node.module.startswith("pytest_export"):
                found.add(node.module.removeprefix("pytest_export").lstrip(".") or "__init__")
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("pytest_export.") for a in node.names if a.name.startswith("pytest_export."))
    return {m for m in found if m != name}


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
