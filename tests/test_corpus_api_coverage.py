"""Every public name of ``torch.export`` is exercised by some corpus case.

The corpus sources are read statically (AST): a name counts when code uses it, as ``torch.export.NAME``
(or through a module alias) or as a name imported from ``torch.export...`` and then used; importing alone
does not count. Members that matter as much as the names (``Dim.AUTO``, the ExportedProgram accessors,
strict and non-strict export) are required the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "corpus"

EXTRA_NAMES = ("refine_dynamic_shapes_from_suggested_fixes",)  # public, in torch.export.dynamic_shapes
DIM_MEMBERS = ("AUTO", "DYNAMIC", "STATIC")
PROGRAM_ACCESSORS = (
    "graph_signature", "state_dict", "constants", "tensor_constants", "range_constraints", "module_call_graph",
    "named_parameters", "named_buffers", "parameters", "buffers", "example_inputs", "verifiers", "dialect",
    "call_spec", "graph", "graph_module", "module", "run_decompositions", "validate",
)


def required_names() -> set[str]:
    import torch.export

    names = set(torch.export.__all__) | set(EXTRA_NAMES)
    names |= {f"Dim.{m}" for m in DIM_MEMBERS}
    names |= {f"ExportedProgram.{a}" for a in PROGRAM_ACCESSORS}
    names |= {"export(strict=True)", "export(strict=False)"}
    return names


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Uses(ast.NodeVisitor):
    def __init__(self) -> None:
        self.imported: dict[str, str] = {}  # local name -> torch.export name
        self.modules: dict[str, str] = {"torch": "torch"}  # local name -> module path
        self.found: set[str] = set()
        self.strict: set[bool] = set()

    # imports ------------------------------------------------------------------------
    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and (node.module == "torch.export" or node.module.startswith("torch.export.")):
            for alias in node.names:
                self.imported[alias.asname or alias.name] = alias.name

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.startswith("torch.export") and alias.asname:
                self.modules[alias.asname] = alias.name

    # uses ---------------------------------------------------------------------------
    def _export_name(self, node: ast.AST) -> str | None:
        """The torch.export name an expression refers to, if any."""
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in self.imported:
            return self.imported[node.id]
        if isinstance(node, ast.Attribute):
            base = _dotted(node.value)
            if base is not None:
                head, _, rest = base.partition(".")
                path = ".".join(p for p in (self.modules.get(head, head), rest) if p)
                if path == "torch.export" or path.startswith("torch.export."):
                    return node.attr
        return None

    def visit_Name(self, node: ast.Name) -> None:
        name = self._export_name(node)
        if name:
            self.found.add(name)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self._export_name(node)
        if name:
            self.found.add(name)
        if node.attr in DIM_MEMBERS and self._export_name(node.value) == "Dim":
            self.found.add(f"Dim.{node.attr}")
        if node.attr in PROGRAM_ACCESSORS:
            self.found.add(f"ExportedProgram.{node.attr}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        target = self._export_name(node.func)
        marker = _dotted(node.func) == "pytest.mark.exportable"
        if target == "export" or marker:
            strict = next((k.value for k in node.keywords if k.arg == "strict"), ast.Constant(False))
            if isinstance(strict, ast.Constant) and isinstance(strict.value, bool):
                self.found.add(f"export(strict={strict.value})")
        self.generic_visit(node)


def exercised_names(corpus: Path) -> set[str]:
    """The torch.export names (and members) used by the corpus sources under ``corpus``."""
    found: set[str] = set()
    for path in sorted(corpus.glob("*.py")):
        visitor = _Uses()
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        found |= visitor.found
    return found


def test_every_public_torch_export_name_is_exercised_by_the_corpus():
    missing = sorted(required_names() - exercised_names(CORPUS))
    assert not missing, (
        f"public torch.export API not exercised by any case in {CORPUS}: {', '.join(missing)}. "
        "Add a case that uses each (a marked case, or a test that calls the export_check fixture)."
    )


FAKE_CORPUS = '''
import pytest, torch
import torch.export as te
from torch.export import Dim, dims as make_dims, ShapesCollection
from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO}}, strict=True)
def test_a():
    return torch.nn.ReLU(), (torch.randn(2),)

def test_b(export_check):
    ep = te.export(torch.nn.ReLU(), (torch.randn(2),))
    ep.graph_signature
    make_dims("a", "b")
    refine_dynamic_shapes_from_suggested_fixes("", {})
'''


def _fake(tmp_path: Path, body: str) -> Path:
    (tmp_path / "test_fake.py").write_text(body)
    return tmp_path


def test_scanner_sees_imports_aliases_members_and_strictness(tmp_path):
    found = exercised_names(_fake(tmp_path, FAKE_CORPUS))
    assert {"Dim", "Dim.AUTO", "dims", "export", "refine_dynamic_shapes_from_suggested_fixes",
            "ExportedProgram.graph_signature", "export(strict=True)", "export(strict=False)"} <= found
    assert "ShapesCollection" not in found  # imported, never used


@pytest.mark.parametrize("removed, old, new", [
    ("dims", 'make_dims("a", "b")', "pass"),
    ("Dim.AUTO", "Dim.AUTO", "Dim('x')"),
    ("refine_dynamic_shapes_from_suggested_fixes", 'refine_dynamic_shapes_from_suggested_fixes("", {})', "pass"),
    ("export(strict=True)", "strict=True", "strict=False"),
    ("ExportedProgram.graph_signature", "ep.graph_signature", "ep"),
])
def test_removing_a_use_from_the_corpus_is_detected(tmp_path, removed, old, new):
    assert old in FAKE_CORPUS
    before = exercised_names(_fake(tmp_path, FAKE_CORPUS))
    after = exercised_names(_fake(tmp_path, FAKE_CORPUS.replace(old, new)))
    assert removed in before and removed not in after


def test_required_names_follow_the_installed_torch():
    import torch.export

    names = required_names()
    assert set(torch.export.__all__) <= names and "refine_dynamic_shapes_from_suggested_fixes" in names
    assert {"export", "save", "load", "draft_export", "unflatten", "Dim", "ShapesCollection"} <= names
