"""A model-based test of the gate (issue #32): Hypothesis draws a small model repository and a few ways to run it,
real pytest sessions run over it, and the gate's invariants are checked on what they did.

The repository: 2-4 cases in 1-2 test files, each a tiny module with a chosen fate (passes; fails ``export``, a
branch on ``x.shape[0] > 2`` declared ``Dim("b", min=2, max=8)``; fails ``compare``, a ``self.n += 1`` in its
output; expected by the marker's ``xfail=``; raises while building its case; under ``@pytest.mark.xfail``; under
``@pytest.mark.skip``), sometimes a file that cannot be imported, and a baseline written by a first
``--export-baseline-update`` run or drawn by hand (known, missing and stale entries, an entry of a case that is
gone, one of the unimportable file's case). Each case is tagged with its own name, so that the conformance table has
one row per case.

The runs: serial in-process (``pytester.runpytest``) with some of ``-k`` deselection, ``--ignore`` of a file, ``-x``
and fewer skipped stages (``--export-skip-stages guards,fuzz,retrace`` most of the time: the gate, not the stages, is
under test); an update run; two pytest-split shards merged by ``python -m pytest_export merge``; and, marked
``slow``, the same under ``-n 2`` in a subprocess. The invariants:

- the run's exit status, ``gate`` on its report and ``gate`` on its ``.jsonl`` case lines agree (pass or fail, and
  the same ``new``/``stale``/``error`` lines as the end of the run), and ``gate`` on the merged shards agrees with
  the unsharded run;
- a run with a collection error, or with a selected case that raised while building, never passes any of them;
- ``--export-baseline-update`` removes only entries of a stage that ran and passed (or of a case that is gone,
  in a run that covered its folder whole), records a failure it saw, and writes nothing after a run that stopped
  early (``-x`` stop, collection error);
- a run that went to the end holds each selected case, with the verdict its kind and its entries imply where the
  model says one (``passed``, ``stale``, ``new``, ``known``, ``xfailed``, ``error``);
- the terminal summary's head, ``python -m pytest_export show`` and the conformance table give each case the same
  verdict word (``verdicts.said``; a ``stale`` case is held to it by its own test, ``xfail``: see there).

Deterministic (``derandomize=True``, no shrinking: a shrink would rerun real sessions for minutes; the failing
example's drawn repository is printed). Default: ``MODEL_EXAMPLES`` serial examples and ``XDIST_EXAMPLES`` under
xdist, about a minute on 2 cores; a larger run by hand::

    PYTEST_EXPORT_GATE_MODEL_EXAMPLES=30 pytest tests/test_gate_model.py

(the xdist test draws a fifth of that number).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, event, given, note, seed, settings
from hypothesis import strategies as st

from pytest_export.__main__ import main

MODEL_EXAMPLES = int(os.environ.get("PYTEST_EXPORT_GATE_MODEL_EXAMPLES", "10"))
XDIST_EXAMPLES = max(2, MODEL_EXAMPLES // 5)
SETTINGS = dict(deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck))

HEADER = '''
import pytest, torch
from torch.export import Dim

class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 2:
            return x + 1
        return x - 1

class Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0
    def forward(self, x):
        self.n += 1
        return x * self.n
'''
X = "(torch.ones(3, 2),)"
# kind: (extra decorator, marker keywords, body, the stage it fails or None)
KINDS = {
    "passes": ("", "", f"return torch.nn.Identity(), {X}", None),
    "linear": ("", "", f"torch.manual_seed(0)\n    return torch.nn.Linear(2, 2).eval(), {X}", None),
    "export_fails": ("", ', dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}}', f"return Branchy(), {X}", "export"),
    "compare_fails": ("", "", f"return Stateful(), {X}", "compare"),
    "xfail_kw": ("", ', xfail={"compare": "planted"}', f"return Stateful(), {X}", None),
    "raises": ("", "", 'raise RuntimeError("cannot build the case")', None),
    "marked_xfail": ('@pytest.mark.xfail(reason="tracked")\n', "", f"return Stateful(), {X}", None),
    "skipped": ('@pytest.mark.skip(reason="not here")\n', "", f"return torch.nn.Identity(), {X}", None),
}
BROKEN = "test_broken.py"  # a file that cannot be imported, with one case
BROKEN_ID = BROKEN + "::test_unreached"
GONE_ID = "test_m0.py::test_gone"
FAST = "guards,fuzz,retrace"


def source(cases) -> str:
    out = HEADER
    for name, kind in cases:
        deco, kw, body, _ = KINDS[kind]
        out += f"\n{deco}@pytest.mark.exportable(tags=[{name!r}]{kw})\ndef {name}():\n    {body}\n"
    return out


@st.composite
def repos(draw):
    kinds = draw(st.lists(st.sampled_from([*KINDS, "passes", "linear"]), min_size=2, max_size=4))
    nfiles = draw(st.integers(1, 2))
    files: dict[str, list[tuple[str, str]]] = {}
    for i, kind in enumerate(kinds):
        f = 0 if i == 0 else draw(st.integers(0, nfiles - 1))
        files.setdefault(f"test_m{f}.py", []).append((f"test_{kind}_{i}", kind))
    broken = draw(st.integers(0, 4)) == 4  # (Hypothesis' first example, all zeros, is a plain repository)
    # the baseline: written by a first update run, or by hand (some known entries, some missing, some stale)
    entries: dict[str, dict[str, dict[str, str]]] = {}
    by_update = draw(st.booleans())
    if not by_update:
        for fname, cases in files.items():
            for name, kind in cases:
                stage = KINDS[kind][3] or draw(st.sampled_from(["compare", "serde", "export"]))
                if draw(st.booleans()):  # listed: known where it fails, stale where it passes
                    entries.setdefault(f"{fname}::{name}", {})[stage] = {"reason": "drawn"}
        if draw(st.booleans()):
            entries[GONE_ID] = {"compare": {"reason": "gone"}}
        if broken and draw(st.booleans()):
            entries[BROKEN_ID] = {"compare": {"reason": "its file cannot be imported"}}
    return {"files": files, "broken": broken, "by_update": by_update, "entries": entries}


@st.composite
def runs(draw, repo):
    """Extra arguments of the main run: ``-k`` deselection, ``--ignore`` of a file, ``-x``, fewer skipped stages."""
    names = [n for cases in repo["files"].values() for n, _ in cases]
    args: list[str] = []
    ignored: list[str] = []
    if len(repo["files"]) > 1 and draw(st.integers(0, 3)) == 3:
        ignored.append("test_m1.py")
    if repo["broken"] and draw(st.booleans()):
        ignored.append(BROKEN)
    for f in ignored:
        args += ["--ignore", f]
    deselected = []
    if len(names) > 2 and draw(st.integers(0, 3)) == 3:
        deselected = [draw(st.sampled_from(names[1:]))]  # test_m0.py's first case stays
        args += ["-k", f"not {deselected[0]}"]
    if draw(st.integers(0, 3)) == 3:
        args.append("-x")
    skip = draw(st.sampled_from([FAST, FAST, FAST, "retrace"]))
    return {"args": args, "ignored": ignored, "deselected": deselected, "skip": skip,
            "update_after": draw(st.booleans()), "shards": not args and draw(st.booleans())}


# ---------------------------------------------------------------------------------------------------- the runs


def plant(pytester, repo) -> None:
    for p in pytester.path.iterdir():  # a fresh repository each example (and no stale bytecode)
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for fname, cases in repo["files"].items():
        (pytester.path / fname).write_text(source(cases))
    if repo["broken"]:
        (pytester.path / BROKEN).write_text("import not_a_module\n" + source([("test_unreached", "passes")]))
    (pytester.path / "b.json").write_text(json.dumps({"version": 2, "failures": repo["entries"], "non_core_ops": {}}))
    ids = [n for f, cases in repo["files"].items() for n in (f"{f}::{c}" for c, _ in cases)]
    (pytester.path / ".test_durations").write_text(json.dumps({i: 1.0 for i in ids}))


def run(pytester, *args, report="r.json", skip=FAST, xdist=False):
    argv = ["--export-check", "-p", "no:cacheprovider", "--export-baseline", "b.json", "--export-report", report,
            "--export-skip-stages", skip, "--export-summary=full", *args]  # the tables, even of a green run:
    if xdist:                                                                # check_words reads them
        return pytester.runpytest_subprocess("-n", "2", *argv)
    return pytester.runpytest("-p", "no:xdist", *argv)


FINDINGS = ("new: ", "stale: remove it: ", "stale (warning): ", "error (never baselined): ", "failed: ", "xfailed by ")


def findings(lines) -> list[str]:
    """The gate's lines about cases and entries, as the end of a run and ``gate`` print them."""
    return sorted(line for line in lines if line.startswith(FINDINGS))


def gate(pytester, capsys, report, lines=None) -> int:
    capsys.readouterr()
    rc = main(["gate", str(pytester.path / report), "--baseline", str(pytester.path / "b.json")])
    out = capsys.readouterr().out
    note(f"gate {report}: {rc}\n" + out)
    if lines is not None:
        lines.extend(findings(out.splitlines()))
    return rc


def load(pytester, name):
    path = pytester.path / name
    return json.loads(path.read_text()) if path.exists() else None


# ---------------------------------------------------------------------------------------------------- the invariants


def must_fail(repo, cfg) -> bool:
    """A collection error, or a selected case that raised while building: no gate may pass."""
    if repo["broken"] and BROKEN not in cfg["ignored"]:
        return True
    return any(kind == "raises" and f not in cfg["ignored"] and name not in cfg["deselected"]
               for f, cases in repo["files"].items() for name, kind in cases)


def check_gates_agree(pytester, capsys, result, repo, cfg, report="r.json") -> bool:
    """The run's exit status, ``gate`` on its report and on its case lines: one verdict."""
    note(result.stdout.str()[-4000:])
    assert result.ret in (0, 1, 2), result.ret  # never a usage error, never "no tests collected"
    passed = result.ret == 0
    of_report: list[str] = []
    of_lines: list[str] = []
    assert (gate(pytester, capsys, report, of_report) == 0) == passed
    assert (gate(pytester, capsys, report.replace(".json", ".jsonl"), of_lines) == 0) == passed
    assert of_report == of_lines  # and they say the same
    lines = result.outlines
    at = next((i for i, ln in enumerate(lines) if "= export baseline " in ln), None)
    if at is not None:  # the end of the run's section (not the tests' failure texts)
        end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("=")), len(lines))
        assert findings(lines[at + 1:end]) == of_report
        event("in-run gate lines compared")
    if must_fail(repo, cfg):
        assert not passed
    event(f"run: exit status {result.ret}" + (" (must fail)" if must_fail(repo, cfg) else ""))
    return passed


def check_update(pytester, before: str, result, repo, cfg, report="r.json") -> None:
    """An update removes only entries of a stage that ran and passed (or of a case that is gone, in a run that
    covered its folder whole); it writes nothing after a run that stopped early."""
    after = (pytester.path / "b.json").read_text()
    data = load(pytester, report)
    scope = (data or {}).get("scope") or {}
    stopped = (repo["broken"] and BROKEN not in cfg["ignored"]) or bool(scope.get("stopped"))
    event("update: " + ("stopped, nothing written" if stopped else "written" if after != before else "unchanged"))
    if stopped:
        assert after == before, "an update wrote the baseline after a run that stopped early"
        return
    old, new = json.loads(before)["failures"], json.loads(after)["failures"]
    cases = {c["nodeid"]: c for c in data["cases"]}
    whole = not cfg["args"]
    for nodeid, stages in old.items():
        for stage in stages:
            if stage in new.get(nodeid, {}):
                continue
            if nodeid == GONE_ID:
                assert whole, f"a subset run pruned {nodeid} [{stage}]"
                continue
            status = ((cases.get(nodeid) or {}).get("stages") or {}).get(stage, {}).get("status")
            assert status == "passed", f"the update removed {nodeid} [{stage}], whose stage reached {status!r}"
    for f, named in repo["files"].items():  # a failure of an unmarked case is recorded
        for name, kind in named:
            stage, nodeid = KINDS[kind][3], f"{f}::{name}"
            if stage and not KINDS[kind][0] and cases.get(nodeid, {}).get("stages", {}).get(stage, {}).get(
                    "status") == "failed":
                assert stage in new.get(nodeid, {}), f"the update did not record {nodeid} [{stage}]"


def expected(kind: str, listed: dict) -> str | None:
    """The verdict the model predicts for a case of ``kind`` whose baseline entries are ``listed`` (None: the
    model does not say)."""
    fails = KINDS[kind][3]
    if kind in ("passes", "linear"):
        return "stale" if listed else "passed"  # a listed stage ran and passed
    if fails:
        return "known" if set(listed) == {fails} else "new" if not listed else None
    if kind in ("xfail_kw", "marked_xfail"):
        return None if listed else "xfailed"
    return {"raises": "error"}.get(kind)


def check_model(pytester, repo, cfg, entries: dict, report="r.json") -> None:
    """A run that went to the end holds each selected case, with the verdict its kind and its entries imply."""
    if "-x" in cfg["args"] or (repo["broken"] and BROKEN not in cfg["ignored"]):
        return
    data = load(pytester, report)
    got = {c["nodeid"]: c["verdict"] for c in data["cases"]}
    want = {f"{f}::{name}": kind for f, cases in repo["files"].items() if f not in cfg["ignored"]
            for name, kind in cases if name not in cfg["deselected"] and kind != "skipped"}
    assert set(got) == set(want), (got, want)
    for nodeid, kind in want.items():
        verdict = expected(kind, entries.get(nodeid, {}))
        assert verdict in (None, got[nodeid]), (nodeid, kind, got[nodeid], verdict)
        event(f"verdict {got[nodeid]} predicted" if verdict else f"verdict {got[nodeid]} unpredicted")


CLASS = {"passed": "pass", "xpassed": "pass", "failed": "fail", "error": "fail", "new": "fail", "stale": "fail",
         "known": "known", "xfailed": "xfail", "skipped": "skip"}
HEAD_WORDS = [("passed", "passed"), ("known failure", "known"), ("new failure", "new"), ("failing", "failed"),
              ("stale baseline entr", "stale"), ("error", "error"), ("xfailed", "xfailed"), ("xpassed", "xpassed"),
              ("skipped", "skipped")]


def head_counts(line: str) -> Counter:
    """``5 cases: 1 passed, 2 failing, 1 error (...)`` -> its verdicts, counted."""
    out: Counter = Counter()
    body = re.sub(r"\s*\([^)]*\)", "", line.split(": ", 1)[1]) if ": " in line else ""
    for part in filter(None, body.split(", ")):
        n, words = part.split(" ", 1)
        out[next(v for w, v in HEAD_WORDS if words.startswith(w))] += int(n)
    return out


def conformance_rows(lines: list[str]) -> dict[str, Counter]:
    """{tag: its outcome cell, as {column: n}} from the terminal's conformance table."""
    at = next(i for i, ln in enumerate(lines) if "= export conformance (torch " in ln)
    end = next(i for i in range(at, len(lines)) if lines[i].startswith("each cell: "))
    columns = lines[end].split()[2].split("/")
    out = {}
    for ln in lines[at + 2:end]:
        cells = [c.strip() for c in ln.split("|")]
        if len(cells) > 2 and cells[1].isdigit():
            out[cells[0]] = +Counter(dict(zip(columns, map(int, cells[2].split("/")))))
    return out


def show_words(pytester, capsys, report="r.json") -> dict[str, str]:
    capsys.readouterr()
    assert main(["show", str(pytester.path / report)]) == 0
    rows = [ln.split("|") for ln in capsys.readouterr().out.splitlines() if ln.startswith("test_")]
    return {cells[0].strip(): cells[1].strip() for cells in rows}


def check_words(pytester, capsys, result, report="r.json", stale_too=False) -> None:
    """The terminal's head, ``show`` and the conformance table give each case one verdict."""
    data = load(pytester, report)
    if not data or not data["cases"]:
        return
    lines = result.stdout.lines
    at = next(i for i, ln in enumerate(lines) if "= export summary (torch " in ln)
    head = head_counts(lines[at + 1])
    shown, table = show_words(pytester, capsys, report), conformance_rows(lines)
    stale = set() if stale_too else {c["nodeid"] for c in data["cases"] if c.get("verdict") == "stale"}
    assert sum(head.values()) == len(data["cases"]) == len(shown)
    head["stale"] -= len(stale)
    assert +head == Counter(c["verdict"] for c in data["cases"] if c["nodeid"] not in stale)
    by_class = Counter(CLASS[v] for v, n in head.items() for _ in range(n))
    assert by_class == Counter(CLASS[w] for n, w in shown.items() if n not in stale)
    untagged: Counter = Counter()
    for c in data["cases"]:
        word = CLASS[shown[c["nodeid"]]]
        if not c.get("tags"):  # a case that could not be built: its row is (untagged)
            untagged[word] += 1
        elif c["nodeid"] not in stale:
            assert word == CLASS[c["verdict"]], (c["nodeid"], shown)
            (column,) = table[c["tags"][0]]
            assert word == CLASS[column], (c["nodeid"], shown, table)
    if untagged:
        assert Counter({CLASS[k]: n for k, n in table["(untagged)"].items()}) == untagged, table


# ---------------------------------------------------------------------------------------------------- the tests


def session(pytester, capsys, repo, cfg, xdist=False) -> None:
    note(f"repository: {repo}\nrun: {cfg}")
    plant(pytester, repo)
    whole = {"args": [], "ignored": [], "deselected": []}
    if repo["by_update"]:  # the baseline written by a first, whole run
        before = (pytester.path / "b.json").read_text()
        r = run(pytester, "--export-baseline-update", report="u.json", xdist=xdist)
        if must_fail(repo, whole):
            assert r.ret != 0
        check_update(pytester, before, r, repo, whole, report="u.json")
    entries = json.loads((pytester.path / "b.json").read_text())["failures"]
    r = run(pytester, *cfg["args"], skip=cfg["skip"], xdist=xdist)
    passed = check_gates_agree(pytester, capsys, r, repo, cfg)
    check_model(pytester, repo, cfg, entries)
    check_words(pytester, capsys, r)
    if cfg["shards"] and not xdist:  # the merged shards' gate is the whole run's
        for group in (1, 2):
            run(pytester, "--splits", "2", "--group", str(group), "--splitting-algorithm", "least_duration",
                "--durations-path", ".test_durations", report=f"s{group}.json", skip=cfg["skip"])
        capsys.readouterr()
        assert main(["merge", "-o", str(pytester.path / "m.json"), *(str(pytester.path / f"s{g}.json") for g in (1, 2))
                     ]) == 0
        assert (gate(pytester, capsys, "m.json") == 0) == passed
        event("shards merged")
    if cfg["update_after"]:
        before = (pytester.path / "b.json").read_text()
        r = run(pytester, "--export-baseline-update", *cfg["args"], skip=cfg["skip"], report="u.json", xdist=xdist)
        if must_fail(repo, cfg):
            assert r.ret != 0
        check_update(pytester, before, r, repo, cfg, report="u.json")


@pytest.mark.slow
@settings(max_examples=MODEL_EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_the_gate_model_serial(pytester, capsys, data):
    repo = data.draw(repos(), label="repository")
    session(pytester, capsys, repo, data.draw(runs(repo), label="run"))


@pytest.mark.slow
@seed(0)  # deterministic as derandomize is: a plain repository, then a collection error with --ignore and updates
@settings(max_examples=XDIST_EXAMPLES, **{**SETTINGS, "derandomize": False})
@given(data=st.data())
def test_the_gate_model_under_xdist(pytester, capsys, data):
    repo = data.draw(repos(), label="repository")
    cfg = data.draw(runs(repo), label="run")
    session(pytester, capsys, repo, cfg, xdist=True)


def test_a_stale_case_has_one_word_in_every_table(pytester, capsys):
    repo = {"files": {"test_m0.py": [("test_passes_0", "passes")]}, "broken": False, "by_update": False,
            "entries": {"test_m0.py::test_passes_0": {"compare": {"reason": "drawn"}}}}
    plant(pytester, repo)
    r = run(pytester)
    assert r.ret == 1
    check_words(pytester, capsys, r, stale_too=True)
