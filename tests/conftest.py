"""Test-suite set-up.

Plugin tests run pytest in-process with ``pytester`` for speed. pytester drops every module an inner run
imported when it ends; torch cannot be imported twice in one process, so torch's modules (and the modules
they pin) are kept across inner runs. The tests that prove the plugin does not import torch run pytest in a
subprocess instead.
"""

from __future__ import annotations

import _pytest.pytester as _pytester
import pytest

_KEEP = ("torch", "functorch", "sympy", "mpmath", "hypothesis", "xdist", "execnet", "filelock", "jinja2", "markupsafe",
         "networkx", "fsspec", "typing_extensions", "pytest_export", "numpy", "transformers", "tokenizers",
         "safetensors", "regex", "yaml",
         # the onnx stage's packages (onnx's and onnxruntime's C extensions load once per process too)
         "onnx", "onnxscript", "onnxruntime", "onnx_ir", "ml_dtypes",
         # the executorch stage's (its runtime's C extension, and torchao's, load once per process too)
         "executorch", "torchao", "ruamel", "tabulate", "flatbuffers",
         # torch's CUDA wheels load triton lazily (strict export, inductor); its C extension cannot load twice
         "triton")


class _KeepTorchSnapshot(_pytester.SysModulesSnapshot):
    def __init__(self, preserve=None):
        def keep(name: str) -> bool:
            return name.split(".")[0] in _KEEP or bool(preserve and preserve(name))

        super().__init__(preserve=keep)


_pytester.SysModulesSnapshot = _KeepTorchSnapshot


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch):
    """Inner runs must not append their summaries to the CI job page of the outer run."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
