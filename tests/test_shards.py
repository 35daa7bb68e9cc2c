"""Many machines (issue #19): shards of pytest-split each gate what they ran, their reports merge into one that
``python -m pytest_export gate`` judges as the whole run, and the report's durations balance the next split.

The split is deterministic: every test writes the durations pytest-split balances by (``DURATIONS``), never
measured ones, so that which shard runs which case does not depend on the machine (issue #24)."""

from __future__ import annotations

import json

import pytest

from pytest_export.__main__ import main
from pytest_export.declare.options import SessionOptions
from pytest_export.gate import baseline as bl
from pytest_export.gate.judge import judge_report
from tests.helpers import LIN, SHORTCUT, write_cases

CASES = SHORTCUT + LIN + '''

@pytest.mark.exportable
def test_relu():
    return torch.nn.ReLU(), (torch.randn(2, 3),)

@pytest.mark.exportable
def test_lin():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)

@pytest.mark.exportable
def test_broken():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable
def test_bn_train():
    torch.manual_seed(0)
    return torch.nn.BatchNorm1d(3).train(), (torch.randn(4, 3),)

@pytest.mark.exportable
def test_tanh():
    return torch.nn.Tanh(), (torch.randn(3),)

@pytest.mark.exportable
def test_sigmoid():
    return torch.nn.Sigmoid(), (torch.randn(3),)

if os.environ.get("NEW_FAILURE"):
    @pytest.mark.exportable
    def test_new_broken():
        return Shortcut(), (torch.ones(2),)
'''
BN = "aten._native_batch_norm_legit_functional.default"
# the baseline lines of the in-run gate's end-of-run section, and the merged gate's (the same texts)
FINDINGS = ("new: ", "stale: remove it: ", "stale (warning): ", "error (never baselined): ", "failed: ")
FAST = ("--export-skip-stages", "retrace")  # the cases have no dynamic dims: guards and fuzz skip by themselves
NAMES = ("test_relu", "test_lin", "test_broken", "test_bn_train", "test_tanh", "test_sigmoid")
DURATIONS = {f"test_cases.py::{n}": 1.0 for n in NAMES}  # fixed: 2 cases a group (3 with test_new_broken)
ALGORITHM = ("--splitting-algorithm", "least_duration")  # the README's recipe


def run(pytester, *args, report=None, subprocess=False):
    argv = ["--export-check", "-p", "no:cacheprovider", "--export-baseline", "baseline.json",
            "--durations-path", ".test_durations", *ALGORITHM, *FAST, *args]
    if report:
        argv += ["--export-report", report]
    if not subprocess:
        argv = ["-p", "no:xdist", *argv]
    return pytester.runpytest_subprocess(*argv) if subprocess else pytester.runpytest(*argv)


def findings(lines):
    return sorted(line for line in lines if line.startswith(FINDINGS))


def nodeids(pytester, report):
    return {c["nodeid"] for c in json.loads((pytester.path / report).read_text())["cases"]}


def write_durations(pytester, durations=DURATIONS):
    (pytester.path / ".test_durations").write_text(json.dumps(durations))


@pytest.fixture
def suite(pytester, monkeypatch):
    """The cases and their baseline (two known failures: a compare shortcut and a non-core op)."""
    monkeypatch.delenv("NEW_FAILURE", raising=False)
    write_cases(pytester, CASES)
    write_durations(pytester)
    r = run(pytester, "--export-baseline-update")
    assert r.ret == 0, r.stdout.str()
    data = json.loads((pytester.path / "baseline.json").read_text())
    assert list(data["failures"]) == ["test_cases.py::test_broken"] and list(data["non_core_ops"]) == [BN]
    return pytester


def plant_gone(pytester):
    """Entries of a case that runs nowhere any more: only the whole run can tell."""
    path = pytester.path / "baseline.json"
    data = json.loads(path.read_text())
    data["failures"]["test_cases.py::test_gone"] = {"compare": {"reason": "removed since", "signature": "mismatch"}}
    data["non_core_ops"]["aten.gone.default"] = ["test_cases.py::test_gone"]
    path.write_text(json.dumps(data))


@pytest.mark.slow
def test_a_shard_gates_only_what_it_ran(suite):
    """A shard of pytest-split (``--splits N``, N > 1) is a subset run: entries of tests it did not run are neither
    stale in it nor pruned by an update of it, although it was given the whole folder and collected them all."""
    plant_gone(suite)
    before = bl.load(suite.path / "baseline.json")
    ran = set()
    for group in (1, 2, 3):
        r = run(suite, "--splits", "3", "--group", str(group), report=f"shard-{group}.json")
        assert r.ret == 0, r.stdout.str()
        assert not findings(r.outlines), r.stdout.str()
        ran |= nodeids(suite, f"shard-{group}.json")
        r = run(suite, "--splits", "3", "--group", str(group), "--export-baseline-update")
        assert r.ret == 0 and bl.load(suite.path / "baseline.json") == before, r.stdout.str()
    assert len(ran) == 6
    r = run(suite)  # the whole run does see them
    assert r.ret == 1
    assert findings(r.outlines) == [
        "stale: remove it: non-core op aten.gone.default: no case carries it after decomposition any more",
        "stale: remove it: test_cases.py::test_gone [compare]: the case did not run (removed or renamed?)"]


@pytest.mark.slow
def test_a_test_a_conftest_deselects_is_out_of_scope_and_the_rest_still_gated(suite):
    """Deselection by a conftest (as the corpus keeps only the zoo's CI slice) is no shard: the deselected test's
    entries are neither stale nor pruned, and a case that is gone is still found stale."""
    plant_gone(suite)
    suite.makeconftest('''
def pytest_collection_modifyitems(config, items):
    drop = [i for i in items if i.name == "test_broken"]
    items[:] = [i for i in items if i not in drop]
    config.hook.pytest_deselected(items=drop)
''')
    r = run(suite)
    assert r.ret == 1
    assert findings(r.outlines) == [
        "stale: remove it: non-core op aten.gone.default: no case carries it after decomposition any more",
        "stale: remove it: test_cases.py::test_gone [compare]: the case did not run (removed or renamed?)"]
    r = run(suite, "--export-baseline-update")
    assert r.ret == 0, r.stdout.str()
    data = json.loads((suite.path / "baseline.json").read_text())
    assert list(data["failures"]) == ["test_cases.py::test_broken"]  # kept: deselected, not gone
    assert list(data["non_core_ops"]) == [BN]  # the gone case's op pruned


def test_the_report_records_each_tests_duration_as_pytest_split_does(pytester):
    """``duration`` is the test's setup + call + teardown, the sum pytest-split's --store-durations writes."""
    write_cases(pytester, '''
@pytest.mark.exportable
def test_relu():
    return torch.nn.ReLU(), (torch.randn(2, 3),)

def test_twice(export_check):
    export_check(torch.nn.ReLU(), (torch.randn(3),))
    export_check(torch.nn.Tanh(), (torch.randn(3),))

def test_plain():
    pass
''')
    r = pytester.runpytest("--export-check", "-p", "no:cacheprovider", "-p", "no:xdist", *FAST, "--export-report",
                           "r.json", "--store-durations", "--durations-path", "split.json")
    r.assert_outcomes(passed=3)
    cases = {c["nodeid"]: c for c in json.loads((pytester.path / "r.json").read_text())["cases"]}
    assert "duration" not in cases["test_cases.py::test_twice#2"]  # a second call is no test of its own
    assert main(["durations", str(pytester.path / "r.json"), "-o", str(pytester.path / "ours.json")]) == 0
    split = json.loads((pytester.path / "split.json").read_text())
    ours = json.loads((pytester.path / "ours.json").read_text())
    assert set(ours) == {"test_cases.py::test_relu", "test_cases.py::test_twice"}
    for nodeid, seconds in ours.items():
        assert seconds == pytest.approx(split[nodeid], abs=1e-6) and seconds > 0


# the first case pays torch's first export: with durations so skewed, duration_based_chunks (pytest-split's
# default) fills group 2 with every other case and leaves group 3 empty
SKEWED = {**DURATIONS, "test_cases.py::test_relu": 60.0}
CHUNKS = ("--splitting-algorithm", "duration_based_chunks")


@pytest.mark.parametrize("xdist", [(), pytest.param(("-n", "2"), marks=pytest.mark.slow)], ids=["serial", "xdist"])
def test_a_shard_that_received_no_cases_passes_and_says_so(suite, capsys, xdist):
    write_durations(suite, SKEWED)
    plant_gone(suite)
    r = run(suite, *CHUNKS, "--splits", "3", "--group", "3", *xdist, report="shard-3.json", subprocess=bool(xdist))
    assert r.ret == 0, r.stdout.str()
    r.stdout.fnmatch_lines(["pytest-export: group 3 of 3 (pytest-split) received no tests: the other groups have "
                            "them all; exit status 0, not pytest's 5 (no tests collected)"])
    assert not findings(r.outlines)
    # its report holds no case, and its group: the merged report of the three groups is whole
    scope = json.loads((suite.path / "shard-3.json").read_text())["scope"]
    assert scope["selected"] == [] and scope["split"] == {"splits": 3, "groups": [3]}
    for group in (1, 2):
        assert run(suite, *CHUNKS, "--splits", "3", "--group", str(group), *xdist, report=f"shard-{group}.json",
                   subprocess=bool(xdist)).ret == 0
    assert len(nodeids(suite, "shard-1.json")) == 1 and len(nodeids(suite, "shard-2.json")) == 5
    assert main(["merge", "-o", str(suite.path / "report.json"),
                 *(str(suite.path / f"shard-{g}.json") for g in (1, 2, 3))]) == 0
    whole = run(suite)
    rc, out = merged_gate(suite, capsys)
    assert rc == whole.ret == 1 and findings(out) == findings(whole.outlines) == [
        "stale: remove it: non-core op aten.gone.default: no case carries it after decomposition any more",
        "stale: remove it: test_cases.py::test_gone [compare]: the case did not run (removed or renamed?)"]


def test_least_duration_fills_every_group_with_the_same_durations(suite):
    """The README's recipe: least_duration gives each group its share of the skewed durations."""
    write_durations(suite, SKEWED)
    sizes = []
    for group in (1, 2, 3):
        r = run(suite, "--splits", "3", "--group", str(group), "--collect-only", "-q")
        assert r.ret == 0, r.stdout.str()
        sizes.append(sum(line.startswith("test_cases.py::") for line in r.outlines))
    assert sizes == [1, 3, 2]


def test_a_run_that_collected_nothing_keeps_pytests_status(pytester):
    """Only a shard is let off: a plain run, or a shard of an empty suite, that collected nothing is exit status 5."""
    pytester.makepyfile(test_empty="")
    for args in ((), ("--splits", "2", "--group", "2")):
        r = pytester.runpytest("--export-check", "-p", "no:cacheprovider", "-p", "no:xdist", *args)
        assert r.ret == pytest.ExitCode.NO_TESTS_COLLECTED, args
        assert "received no tests" not in r.stdout.str()


@pytest.mark.slow
def test_a_shard_under_xdist_gates_only_what_it_ran(suite):
    """Under xdist the controller collects nothing; it knows the shard from its options."""
    plant_gone(suite)
    r = run(suite, "-n", "2", "--splits", "3", "--group", "2", report="shard-2.json", subprocess=True)
    assert r.ret == 0, r.stdout.str()
    assert not findings(r.outlines), r.stdout.str()
    assert len(nodeids(suite, "shard-2.json")) == 2


def shards(pytester, *args):
    """Three shards of pytest-split, their reports merged: ({group: exit status}, {group: report})."""
    statuses, reports = {}, {}
    for group in (1, 2, 3):
        r = run(pytester, "--splits", "3", "--group", str(group), *args, report=f"shard-{group}.json")
        statuses[group], reports[group] = r.ret, r
        assert not any("gone" in line for line in findings(r.outlines)), r.stdout.str()
    paths = [str(pytester.path / f"shard-{g}.json") for g in (1, 2, 3)]
    assert main(["merge", "-o", str(pytester.path / "report.json"), *paths]) == 0
    return statuses, reports


def merged_gate(pytester, capsys, *args):
    capsys.readouterr()
    rc = main(["gate", str(pytester.path / "report.json"), "--baseline", str(pytester.path / "baseline.json"), *args])
    return rc, capsys.readouterr().out.splitlines()


@pytest.mark.slow
def test_shards_merged_and_gated_equal_one_unsharded_run(suite, monkeypatch, capsys):
    # 1. the baseline holds: every shard passes, the merged gate passes, as the unsharded run does
    statuses, reports = shards(suite)
    assert statuses == {1: 0, 2: 0, 3: 0}
    assert [len(nodeids(suite, f"shard-{g}.json")) for g in (1, 2, 3)] == [2, 2, 2]
    rc, out = merged_gate(suite, capsys)
    whole = run(suite, report="whole.json")
    assert (rc, findings(out)) == (whole.ret, findings(whole.outlines)) == (0, []), out
    assert out[-1].startswith("gate passed: nothing new or stale, 1 known failure; 6 cases")
    # the durations of this run would balance the next split (every case measured); the split here stays the
    # fixed one, so that it does not depend on this machine's timings
    assert main(["durations", str(suite.path / "report.json"), "-o", str(suite.path / "measured.json")]) == 0
    durations = json.loads((suite.path / "measured.json").read_text())
    assert set(durations) == nodeids(suite, "report.json") and all(v > 0 for v in durations.values())

    # 2. a new failure on one shard, and entries of a case that runs on no shard
    monkeypatch.setenv("NEW_FAILURE", "1")
    plant_gone(suite)
    statuses, reports = shards(suite)
    holder = [g for g in (1, 2, 3) if "test_cases.py::test_new_broken" in nodeids(suite, f"shard-{g}.json")]
    assert statuses == {g: 1 if g in holder else 0 for g in (1, 2, 3)}, statuses  # the shard that ran it fails
    assert findings(reports[holder[0]].outlines) == ["new: test_cases.py::test_new_broken: new failure in compare"]
    rc, out = merged_gate(suite, capsys)
    whole = run(suite, report="whole.json")
    assert rc == whole.ret == 1
    assert findings(out) == findings(whole.outlines) == [
        "new: test_cases.py::test_new_broken: new failure in compare",
        "stale: remove it: non-core op aten.gone.default: no case carries it after decomposition any more",
        "stale: remove it: test_cases.py::test_gone [compare]: the case did not run (removed or renamed?)"], out
    # the items the merged gate fails are the ones the unsharded run failed
    merged = json.loads((suite.path / "report.json").read_text())["cases"]
    options = SessionOptions(check=True, baseline="baseline.json")
    failing = judge_report(bl.load(suite.path / "baseline.json"), merged, options).failing
    unsharded = json.loads((suite.path / "whole.json").read_text())["cases"]
    assert failing == sorted(c["nodeid"] for c in unsharded if c.get("item") == "failed") == [
        "test_cases.py::test_new_broken"]
    # --warn-stale: the stale entries warn in both, the new failure still fails both
    rc, out = merged_gate(suite, capsys, "--warn-stale")
    whole = run(suite, "--export-baseline-warn-stale")
    assert rc == whole.ret == 1 and findings(out) == findings(whole.outlines)
