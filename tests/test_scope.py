"""The run's scope (issue #24): the one record of what a run covered, kept in the report and read by both gates.

A case pytest left out on this machine (skipped, ignored, deselected, in a file that cannot be imported) is out of
scope: its baseline entries are never stale and never pruned, while a case that is gone is still found. pytest's
own ``xfail`` mark on a case is applied as pytest applies it. In every case ``python -m pytest_export gate`` on the
run's report gives the in-run gate's exit status and lines.
"""

from __future__ import annotations

import json

import pytest

from pytest_export.__main__ import main
from pytest_export.gate.scope import Scope
from tests.helpers import SHORTCUT, write_cases

RELU = "    return torch.nn.ReLU(), (torch.ones(3),)\n"
CASES = '''
@pytest.mark.exportable
def test_ok():
''' + RELU
LEFT = "@pytest.mark.exportable\ndef test_left():\n"
# each way a case is left out on this machine: (test_left.py's body, a conftest, extra arguments)
LEFT_OUT = {
    "skipif": ('@pytest.mark.skipif(True, reason="needs a GPU")\n' + LEFT + RELU, "", ()),
    "importorskip": (LEFT + '    pytest.importorskip("no_such_module_here")\n' + RELU, "", ()),
    "importorskip of the module": ('pytest.importorskip("no_such_module_here")\n\n' + LEFT + RELU, "", ()),
    "xfail(run=False)": ('@pytest.mark.xfail(run=False, reason="hangs")\n' + LEFT + RELU, "", ()),
    "--ignore": (LEFT + RELU, "", ("--ignore", "test_left.py")),
    "collect_ignore": (LEFT + RELU, 'collect_ignore = ["test_left.py"]\n', ()),
    "deselected by a conftest": (LEFT + RELU, '''
def pytest_collection_modifyitems(config, items):
    drop = [i for i in items if i.name == "test_left"]
    items[:] = [i for i in items if i not in drop]
    config.hook.pytest_deselected(items=drop)
''', ()),
    "a file that cannot be imported": ("import no_such_module_here\n\n" + LEFT + RELU, "",
                                       ("--continue-on-collection-errors",)),
}
GONE = "stale: remove it: test_cases.py::test_gone [compare]: the case did not run (removed or renamed?)"
FINDINGS = ("new: ", "stale: remove it: ", "stale (warning): ", "error (never baselined): ", "failed: ", "xfailed by ")


def findings(lines):
    return sorted(line for line in lines if line.startswith(FINDINGS))


def write_baseline(pytester, failures, non_core_ops=None):
    (pytester.path / "baseline.json").write_text(json.dumps({"version": 2, "failures": failures,
                                                             "non_core_ops": non_core_ops or {}}))


def run(pytester, *args, subprocess=False):
    argv = ["--export-check", "-p", "no:cacheprovider", "--export-baseline", "baseline.json", "--export-report",
            "report.json", "--export-skip-stages", "retrace", *args]
    return pytester.runpytest_subprocess(*argv) if subprocess else pytester.runpytest("-p", "no:xdist", *argv)


def gate(pytester, capsys):
    capsys.readouterr()
    rc = main(["gate", str(pytester.path / "report.json"), "--baseline", str(pytester.path / "baseline.json")])
    return rc, capsys.readouterr().out.splitlines()


def plant(pytester, how):
    body, conftest, args = LEFT_OUT[how]
    write_cases(pytester, CASES)
    write_cases(pytester, body, name="test_left")
    if conftest:
        pytester.makeconftest(conftest)
    # the left-out case's entries, and those of a case that is gone from a file the run collected
    write_baseline(pytester, {"test_left.py::test_left": {"compare": {"reason": "kept"}},
                              "test_cases.py::test_gone": {"compare": {"reason": "gone"}}},
                   {"aten.left.default": ["test_left.py::test_left"],
                    "aten.gone.default": ["test_cases.py::test_gone"]})
    return args


@pytest.mark.parametrize("how", list(LEFT_OUT))
def test_a_case_left_out_is_neither_stale_nor_pruned(pytester, capsys, how):
    args = plant(pytester, how)
    r = run(pytester, *args)
    expected = [GONE, "stale: remove it: non-core op aten.gone.default: no case carries it after decomposition any "
                      "more"]
    assert r.ret == 1 and findings(r.outlines) == sorted(expected), r.stdout.str()
    rc, out = gate(pytester, capsys)  # the merged gate reads the same scope from the report
    assert (rc, findings(out)) == (r.ret, findings(r.outlines)), out
    r = run(pytester, "--export-baseline-update", *args)
    assert r.ret == (1 if how == "a file that cannot be imported" else 0), r.stdout.str()
    data = json.loads((pytester.path / "baseline.json").read_text())
    assert data["failures"] == {"test_left.py::test_left": {"compare": {"reason": "kept"}}}
    assert data["non_core_ops"] == {"aten.left.default": ["test_left.py::test_left"]}


@pytest.mark.slow
def test_cases_left_out_under_xdist(pytester, capsys):
    """Under xdist the workers collect (deselection, ignored paths, module skips) and the controller gets the
    tests' reports (skips, xfail marks): the scope is the same."""
    plant(pytester, "deselected by a conftest")
    write_cases(pytester, LEFT_OUT["skipif"][0].replace("test_left", "test_skipped"), name="test_skipped")
    write_cases(pytester, LEFT_OUT["importorskip of the module"][0].replace("test_left", "test_mod"), name="test_mod")
    write_cases(pytester, LEFT + RELU, name="test_ignored")
    failures = {f"{f}.py::{t}": {"compare": {"reason": "kept"}} for f, t in (
        ("test_left", "test_left"), ("test_skipped", "test_skipped"), ("test_mod", "test_mod"),
        ("test_ignored", "test_left"))}
    write_baseline(pytester, {**failures, "test_cases.py::test_gone": {"compare": {"reason": "gone"}}})
    r = run(pytester, "-n", "2", "--ignore", "test_ignored.py", subprocess=True)
    assert r.ret == 1 and findings(r.outlines) == [GONE], r.stdout.str()
    rc, out = gate(pytester, capsys)
    assert (rc, findings(out)) == (1, [GONE]), out
    r = run(pytester, "-n", "2", "--ignore", "test_ignored.py", "--export-baseline-update", subprocess=True)
    assert r.ret == 0, r.stdout.str()
    assert json.loads((pytester.path / "baseline.json").read_text())["failures"] == failures


XFAIL_MARKED = SHORTCUT + '''
@pytest.mark.xfail(reason="tracked upstream")
@pytest.mark.exportable
def test_marked():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable
def test_ok():
''' + RELU + '''
if os.environ.get("STRICT"):
    @pytest.mark.xfail(strict=True, reason="must fail")
    @pytest.mark.exportable
    def test_strict():
        return torch.nn.ReLU(), (torch.ones(3),)
'''


@pytest.mark.parametrize("xdist", [(), pytest.param(("-n", "2"), marks=pytest.mark.slow)], ids=["serial", "xdist"])
def test_pytests_own_xfail_mark_is_applied_as_pytest_applies_it(pytester, capsys, monkeypatch, xdist):
    """A failing case under @pytest.mark.xfail is xfailed, not a new failure that fails the run; a strict one that
    passes fails it (XPASS(strict)). The merged gate reads the marks from the report's scope."""
    monkeypatch.delenv("STRICT", raising=False)
    write_cases(pytester, XFAIL_MARKED)
    write_baseline(pytester, {})
    r = run(pytester, *xdist, subprocess=bool(xdist))
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=1, xfailed=1)
    marked = "xfailed by @pytest.mark.xfail: test_cases.py::test_marked: new failure in compare"
    assert findings(r.outlines) == [marked]
    rc, out = gate(pytester, capsys)
    assert (rc, findings(out)) == (0, [marked]), out
    assert out[-1].startswith("gate passed: nothing new or stale")
    scope = json.loads((pytester.path / "report.json").read_text())["scope"]
    assert scope["xfail"] == {"test_cases.py::test_marked": {"strict": False}}

    monkeypatch.setenv("STRICT", "1")
    r = run(pytester, *xdist, subprocess=bool(xdist))
    assert r.ret == 1, r.stdout.str()
    r.assert_outcomes(passed=1, failed=1, xfailed=1)
    rc, out = gate(pytester, capsys)
    assert rc == 1 and findings(out) == sorted([marked, "failed: test_cases.py::test_strict: XPASS(strict): it "
                                                        "passes, and its @pytest.mark.xfail is strict"]), out


# ---- a file that cannot be imported fails both gates (#32) ---------------------------------------------------------

@pytest.mark.parametrize("xdist", [(), pytest.param(("-n", "2"), marks=pytest.mark.slow)], ids=["serial", "xdist"])
def test_a_collection_error_fails_the_gate_on_the_report_as_it_fails_the_run(pytester, capsys, xdist):
    """Serially pytest stops at the error (exit status 2), under xdist it runs the tests anyway (1): either way the
    run failed, and python -m pytest_export gate on its report fails, naming the file, not an interruption."""
    write_cases(pytester, CASES)
    pytester.makepyfile(test_broken="import no_such_module_here\n")
    write_baseline(pytester, {})
    r = run(pytester, *xdist, subprocess=bool(xdist))
    assert r.ret == (1 if xdist else 2), r.stdout.str()
    report = json.loads((pytester.path / "report.json").read_text())
    assert not report["interrupted"] and not report["partial"], report  # pytest stopped it, nobody from outside
    assert report["scope"]["stopped"] == "1 error during collection: test_broken.py"
    for name in ("report.json", "report.jsonl"):
        capsys.readouterr()
        rc = main(["gate", str(pytester.path / name), "--baseline", str(pytester.path / "baseline.json")])
        out = capsys.readouterr().out
        assert rc == 1, out
        assert (f"incomplete run: {pytester.path / name}: 1 collection error: pytest could not collect test_broken.py"
                in out), out
        assert "Ctrl-C" not in out and "gate failed: 1 collection error;" in out, out


# ---- the case lines carry what the gate needs (#32) -------------------------------------------------------------

def test_gate_on_the_case_lines_of_a_finished_run_is_gate_on_its_report(pytester, capsys, monkeypatch):
    """A -k-deselected baseline entry is not stale and a case under @pytest.mark.xfail is no new failure, from the
    .jsonl as from the .json; the lines of a run that did not finish stay partial and never pass."""
    monkeypatch.delenv("STRICT", raising=False)
    write_cases(pytester, "import os\n" + XFAIL_MARKED)
    write_baseline(pytester, {"test_cases.py::test_ok": {"compare": {"reason": "deselected by -k"}}})
    r = run(pytester, "-k", "not test_ok")
    assert r.ret == 0, r.stdout.str()

    def gate_on(name):
        capsys.readouterr()
        rc = main(["gate", str(pytester.path / name), "--baseline", str(pytester.path / "baseline.json")])
        return rc, capsys.readouterr().out.replace(name, "REPORT").splitlines()

    rc, out = gate_on("report.json")
    assert rc == 0 and "xfailed by @pytest.mark.xfail: test_cases.py::test_marked: new failure in compare" in out, out
    assert gate_on("report.jsonl") == (rc, out)
    lines = (pytester.path / "report.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines[-2:]] == ["scope", "session-finish"]
    (pytester.path / "report.jsonl").write_text("\n".join(lines[:-2]) + "\n")  # killed before its end
    rc, out = gate_on("report.jsonl")
    assert rc == 1 and out[0].startswith("partial report: ") and out[-1].startswith("gate failed: the report is "
                                                                                   "partial"), out
    assert "xfailed by @pytest.mark.xfail: test_cases.py::test_marked: new failure in compare" in out, out


# ---- the model, in plain Python ---------------------------------------------------------------------------------

def test_covers_reads_every_way_a_case_is_left_out():
    scope = Scope(folders=["tests"], deselected=["tests/a.py::test_d"], skipped=["tests/a.py::test_s", "tests/m.py"],
                  ignored=["tests/slow"], errors=["tests/broken.py"])
    assert scope.covers("tests/a.py::test_gone") and scope.covers("tests/a.py::test_gone#2")
    for left in ("tests/a.py::test_d", "tests/a.py::test_s#2", "tests/m.py::test_x", "tests/slow/b.py::test_y",
                 "tests/broken.py::test_z", "other/c.py::test_w"):
        assert not scope.covers(left), left
    assert not Scope(folders=None).covers("tests/a.py::t")  # a subset run
    assert not Scope(stopped="stopping after 1 failures").covers("a.py::t")
    assert not Scope(split={"splits": 2, "groups": [1]}).covers("a.py::t")  # a lone shard
    assert Scope(split={"splits": 2, "groups": [1, 2]}).covers("a.py::t")


def test_merged_shards_add_up_to_the_whole_run():
    one = Scope(split={"splits": 2, "groups": [1]}, selected=["a.py::x"], deselected=["a.py::y", "a.py::drop"],
                xfail={"a.py::x": {"strict": True}})
    two = Scope(split={"splits": 2, "groups": [2]}, selected=["a.py::y"], deselected=["a.py::x", "a.py::drop"],
                skipped=["a.py::y"])
    merged = Scope.merged([one, two])
    assert merged.whole == [""] and merged.deselected == ["a.py::drop"] and merged.skipped == ["a.py::y"]
    assert merged.xfail == {"a.py::x": {"strict": True}}
    assert Scope.merged([one]).missing_groups == [2]
    assert Scope.merged([one, None]).whole is None  # a report without a scope: what it covered is unknown
    assert Scope.from_json(json.loads(json.dumps(merged.to_json()))) == merged
    with pytest.raises(ValueError, match="scope.split"):
        Scope.from_json({"split": {"splits": "2"}})
