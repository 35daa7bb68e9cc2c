"""Which zoo cases a corpus run collects (``corpus/conftest.py``): the CI slice always; the rest of the zoo when the
run selects by tag or names the zoo; the real-width cases (tag ``width``) only when the run names their file or
one of their cases, or selects the tag ``width`` itself.

Each command is a real ``pytest --collect-only`` over the repository's corpus, in a subprocess (collection imports
the zoo's files, not its models: a few seconds each).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WIDTH_FILE = "corpus/zoo/test_zoo_width.py"


def _width_tests() -> list[str]:
    tree = ast.parse((ROOT / WIDTH_FILE).read_text())
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


WIDTH = {f"{WIDTH_FILE}::{name}" for name in _width_tests()}


def collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return {line.strip() for line in out.stdout.splitlines() if "::" in line and not line.startswith(" ")}


def test_the_width_file_holds_the_five_real_width_cases():
    assert {n.split("::")[1] for n in WIDTH} == {
        "test_bert_base", "test_gpt2_124m", "test_tinyllama_width_2_layers", "test_vit_b16", "test_resnet50"}


@pytest.mark.slow
@pytest.mark.parametrize("args, zoo_beyond_ci, width", [
    (("corpus", "--export-check"), False, False),            # the default corpus run (and CI's)
    (("corpus/zoo", "--export-check"), True, False),         # the whole zoo, named: not the width cases
    (("corpus", "--export-tags", "zoo"), True, False),      # the zoo by tag: neither
    (("corpus", "-m", "zoo"), True, False),
    ((WIDTH_FILE, "--export-check"), False, True),           # the width file, named
    (("corpus", "--export-tags", "width"), False, True),    # the tag width
    (("corpus", "-m", "width"), False, True),
], ids=["corpus", "zoo-folder", "export-tags-zoo", "m-zoo", "width-file", "export-tags-width", "m-width"])
def test_the_width_cases_are_collected_only_when_asked_for(args, zoo_beyond_ci, width):
    pytest.importorskip("transformers", reason="the zoo needs transformers")
    ids = collected(*args)
    assert (ids & WIDTH == WIDTH) if width else not (ids & WIDTH), sorted(ids & WIDTH)
    zoo = {i for i in ids if i.startswith("corpus/zoo/") and i not in WIDTH}
    assert ("corpus/zoo/test_zoo_encoders.py::test_bert" in ids) == (args[0] != WIDTH_FILE and "width" not in args)
    assert ("corpus/zoo/test_zoo_decoders.py::test_gpt2" in zoo) == zoo_beyond_ci  # tagged zoo, not zoo-ci


@pytest.mark.slow
def test_one_width_case_named_by_its_id_is_collected_alone():
    pytest.importorskip("transformers", reason="the zoo needs transformers")
    assert collected(f"{WIDTH_FILE}::test_bert_base") == {f"{WIDTH_FILE}::test_bert_base"}


def test_the_memory_benchmark_builds_its_models_from_the_width_cases():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_memory
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    names = {n.split("::")[1] for n in WIDTH}
    assert set(bench_memory.MODELS.values()) <= names
    assert set(bench_memory.QUICK) <= set(bench_memory.MODELS)
    assert {"bert-base", "tinyllama-2l", "resnet-50"} <= set(bench_memory.MODELS)
    run = (ROOT / "benchmarks" / "run.py").read_text()
    assert "memory    " in run and "[<= 1.3x the raw floor]" in run and '"memory": lambda' in run


BREADTH = "corpus/breadth/test_breadth.py::test_transformers"


@pytest.mark.slow
@pytest.mark.parametrize("args, whole", [
    (("corpus", "--export-check"), False),                 # the default corpus run: the CI sample only
    (("corpus/breadth", "--export-check"), True),          # the slice, named
    (("corpus", "--export-tags", "breadth"), True),        # by tag
    (("corpus", "-m", "breadth"), True),
    (("corpus", "--export-tags", "zoo"), False),           # another tag: the sample only
], ids=["corpus", "breadth-folder", "export-tags-breadth", "m-breadth", "export-tags-zoo"])
def test_the_breadth_slice_keeps_its_ci_sample_unless_asked_for_whole(args, whole):
    pytest.importorskip("transformers", reason="the breadth slice needs transformers")
    import json

    listed = json.loads((ROOT / "corpus/breadth/architectures.json").read_text())
    every = {f"{BREADTH}[{a['model_type']}]" for a in listed["architectures"]}
    sample = {f"{BREADTH}[{name}]" for name in listed["ci_sample"]}
    ids = {i for i in collected(*args) if i.startswith(BREADTH)}
    if "zoo" in args:  # a tag that is not breadth's: the plugin's tag filter leaves none of the slice
        assert ids <= sample
    else:
        assert ids == (every if whole else sample)
    assert len(every) >= 300 and set(listed["ci_sample"]) <= {a["model_type"] for a in listed["architectures"]}
