"""A baseline that sees the next failure (#52): a failure's signature identifies it (the violated dims and guards in
the declaration's names, the model's line and expression, the outputs that disagree, the op), stays the same
where only torch's symbol numbering, paths or line numbers move, and a new break in a known-failing case is new.
The CLI's output paths and hand-edited reports end in one line and exit status 4, never a traceback."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_export.__main__ import main
from pytest_export.gate import baseline as bl
from pytest_export.gate import signature as sig
from pytest_export.report.schema import case_problem

# ---- the signature, as plain text ----------------------------------------------------------------------------

# torch's constraint violation, as 2.13 and 2.14 word it (a named Dim by its name, the guard over the source)
VIOLATION = """torch._dynamo.exc.UserError: Constraints violated (H, W)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of W = L['x'].size()[3] in the specified range 4 <= W <= 64 satisfy the generated guard (L['x'].size()[3] % 2) == 0.
  - Not all values of H = L['x'].size()[2] in the specified range 4 <= H <= 64 satisfy the generated guard (L['x'].size()[2] % 2) == 0.
Suggested fixes:
  _H = Dim('_H', max=32)
  H = 2*_H
"""
NAMES = {"x.shape[2]": "H", "x.shape[3]": "W"}


def test_a_constraint_violation_is_its_dims_and_its_guards_in_the_declarations_names():
    detail = sig.detail_of("export", "UserError", VIOLATION, {"exception": "UserError"}, NAMES)
    assert detail == "constraints violated (H, W): (H % 2) == 0; (W % 2) == 0"
    # one more guard is another failure; the same guards in another order are the same one
    shuffled = VIOLATION.replace("(L['x'].size()[2] % 2) == 0", "(L['x'].size()[2] % 4) == 0")
    assert sig.detail_of("export", "UserError", shuffled, {}, NAMES) != detail
    lines = VIOLATION.splitlines()
    swapped = "\n".join([lines[0], lines[2], lines[1], *lines[3:]])
    assert sig.detail_of("export", "UserError", swapped, {}, NAMES) == detail


def test_specializations_and_equalities_are_named():
    text = ("Constraints violated (T)! ...\n  - You marked T as dynamic but your code specialized it to be a constant "
            "(20). If you're using mark_dynamic, either remove it or use maybe_mark_dynamic instead.\n"
            "  - The values of B = L['a'].size()[0] and A = L['b'].size()[0] must always be equal.\n")
    assert sig.detail_of("export", "UserError", text, {}, {}) == "constraints violated (T): A == B; T specialized to 20"


@settings(max_examples=60, deadline=None)
@given(numbers=st.lists(st.integers(0, 10_000), min_size=3, max_size=3),
       folder=st.sampled_from(["/home/a/repo/", "/builds/x/y/", "C:/work/", ""]), line=st.integers(1, 5000))
def test_a_detail_does_not_move_with_symbols_paths_or_line_numbers(numbers, folder, line):
    s, u, v = numbers
    text = (f"Could not guard on data-dependent expression Eq(u{u}, 1) (unhinted: Eq(u{u}, 1)).\n"
            f"Caused by: ({folder}models/net.py:{line} in forward)\nrefused where 384*s{s} == 12288 at s{v}")
    detail = sig.detail_of("export", "GuardOnDataDependentSymNode", text, {"exception": "GuardOnDataDependentSymNode"},
                           {f"s{s}": "W"}, line=sig.line_of(f"{folder}models/net.py", "forward", "  if x.sum() > 0:"))
    assert detail == "Eq(u#, 1) at net.py in forward: if x.sum() > 0:"
    assert sig.named(f"refused where 384*s{s} == 12288 at s{v}", {f"s{s}": "W"}) == (
        "refused where 384*W == 12288 at " + ("W" if v == s else "s#"))


def test_mismatch_unsupported_op_and_non_core_details():
    errors = [{"path": "[1]", "max_abs_error": 2.0}, {"path": "[0]"}, {"path": "[1]"}]
    assert sig.detail_of("compare", "mismatch", "the program disagrees", {"errors": errors}) == "output [0], [1]"
    assert sig.detail_of("onnx", "unsupported-op", "", {"unsupported_op": "aten.linalg_eig.default"}) == \
        "aten.linalg_eig.default"
    assert sig.detail_of("decomp", "non-core", "", {"non_core": ["aten.b", "aten.a"]}) == "aten.a, aten.b"
    assert sig.detail_of("guards", "refused-in-range", "",
                         {"proof": {"refused": [{"where": "Ne(s77, 37)"}]}}, {"s77": "n"}) == "refused where Ne(n, 37)"
    assert sig.detail_of("fuzz", "wrong-in-range", "smallest failing sizes: n=5", {}) is None


def test_an_older_kind_only_signature_still_matches_and_asks_for_a_refresh():
    precise = sig.compose("UserError", "constraints violated (W): (W % 2) == 0")
    assert sig.matches(precise, precise) == (True, False)
    assert sig.matches("UserError", precise) == (True, True)
    assert sig.matches("UserError", "UserError") == (True, False)
    assert sig.matches(precise, sig.compose("UserError", "constraints violated (H, W): (H % 2) == 0; (W % 2) == 0")) \
        == (False, False)
    assert sig.matches("mismatch", precise) == (False, False)


def test_the_baseline_compares_the_precise_signature():
    stage = {"status": "failed", "signature": "UserError", "detail": "constraints violated (W): (W % 2) == 0",
             "message": "m"}
    case = {"nodeid": "t.py::c", "stages": {"export": stage}}
    assert bl.signature_of(stage) == "UserError: constraints violated (W): (W % 2) == 0"
    old = bl.Baseline({"t.py::c": {"export": {"reason": "r", "signature": "UserError"}}})
    assert bl.judge(case, old) == {"known": {"export": "r"},
                                   "refresh": {"export": "UserError: constraints violated (W): (W % 2) == 0"}}
    other = bl.Baseline({"t.py::c": {"export": {"reason": "r", "signature": "UserError: constraints violated (H)"}}})
    assert "was UserError: constraints violated (H), now UserError: constraints violated (W)" in \
        bl.judge(case, other)["new"]["export"]


# ---- the reproduction: a new constraint in a case baselined with another --------------------------------------

MODEL = '''
import pytest
import torch
from torch.export import Dim

H, W = Dim("H", min=4, max=64), Dim("W", min=4, max=64)


class Net(torch.nn.Module):
    def forward(self, x):
{body}
        return x * 2


@pytest.mark.exportable(dynamic_shapes={{"x": {{2: H, 3: W}}}})
def test_net():
    return Net(), (torch.randn(1, 3, 8, 8),)


class Gate(torch.nn.Module):
    def forward(self, x):
{gate}
        return x - 1


@pytest.mark.exportable(dynamic_shapes={{"x": {{0: Dim("n", min=2, max=16)}}}})
def test_data_dependent():
    return Gate(), (torch.randn(4),)
'''
W_ONLY = "        if x.shape[-1] % 2:\n            x = x[..., :-1]"
H_AND_W = W_ONLY + "\n        if x.shape[-2] % 2:\n            x = x[:, :, :-1, :]"
ON_SUM = "        if x.sum() > 0:\n            x = x + 1"


def write(pytester, body: str, gate: str = ON_SUM) -> None:
    pytester.makepyfile(test_models=MODEL.format(body=body, gate=gate))


def gate_run(pytester, *args: str):
    return pytester.runpytest("--export-check", "-p", "no:cacheprovider", "--export-baseline", "baseline.json", *args)


def baseline(pytester) -> dict:
    return json.loads((pytester.path / "baseline.json").read_text())


@pytest.mark.slow
def test_a_new_guard_in_a_known_failing_export_is_new_and_names_both_signatures(pytester):
    write(pytester, W_ONLY)
    r = gate_run(pytester, "-p", "no:xdist", "--export-baseline-update")
    assert r.ret == 0, r.stdout.str()
    entries = baseline(pytester)["failures"]
    assert entries["test_models.py::test_net"]["export"]["signature"] == \
        "UserError: constraints violated (W): (W % 2) == 0"
    assert entries["test_models.py::test_data_dependent"]["export"]["signature"] == \
        "GuardOnDataDependentSymNode: Eq(u#, 1) at test_models.py in forward: if x.sum() > 0:"

    # unchanged: known, in every run mode, and the known failure says what is known
    for mode in (["-p", "no:xdist"], ["-n", "2"]):
        r = gate_run(pytester, *mode, "-rx")
        assert r.ret == 0, r.stdout.str()
        r.assert_outcomes(xfailed=2)
    r.stdout.fnmatch_lines(["*known failure in the baseline: export (*) (signature export: UserError: constraints "
                            "violated (W): (W % 2) == 0)*"])

    # the model branches on H too: export fails with another constraint; the gate blocks it, naming both
    write(pytester, H_AND_W)
    r = gate_run(pytester, "-p", "no:xdist")
    assert r.ret == 1, r.stdout.str()
    r.stdout.fnmatch_lines(["*new failure in export (different failure than the baseline's: was UserError: "
                            "constraints violated (W): (W % 2) == 0, now UserError: constraints violated (H, W): "
                            "(H % 2) == 0; (W % 2) == 0)*"])


def test_a_line_that_moves_is_the_same_failure_and_a_line_that_changes_is_new(pytester):
    write(pytester, W_ONLY)
    assert gate_run(pytester, "-p", "no:xdist", "--export-baseline-update").ret == 0
    moved = MODEL.format(body=W_ONLY, gate=ON_SUM).replace("class Gate", "# a comment\n\n\nclass Gate")
    pytester.makepyfile(test_models=moved)
    assert gate_run(pytester, "-p", "no:xdist").ret == 0
    write(pytester, W_ONLY, gate="        if x.mean() > 0:\n            x = x + 1")
    r = gate_run(pytester, "-p", "no:xdist")
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*was GuardOnDataDependentSymNode: Eq(u#, 1) at test_models.py in forward: if x.sum() > 0:, "
                            "now GuardOnDataDependentSymNode: * at test_models.py in forward: if x.mean() > 0:*"])


def test_a_type_only_entry_still_matches_and_the_run_names_it_for_a_refresh(pytester):
    write(pytester, W_ONLY)
    (pytester.path / "baseline.json").write_text(json.dumps({"version": 2, "non_core_ops": {}, "failures": {
        "test_models.py::test_net": {"export": {"reason": "old", "signature": "UserError"}},
        "test_models.py::test_data_dependent": {"export": {"reason": "old", "signature": "GuardOnDataDependentSymNode"}},
    }}))
    r = gate_run(pytester, "-p", "no:xdist")
    assert r.ret == 0, r.stdout.str()
    r.stdout.fnmatch_lines(["*refresh: test_models.py::test_net [[]export[]]: the baseline's signature names only the "
                            "kind of failure; rerun with --export-baseline-update to record the precise one (export: "
                            "UserError: constraints violated (W): (W % 2) == 0)*"])
    assert gate_run(pytester, "-p", "no:xdist", "--export-baseline-update").ret == 0
    assert baseline(pytester)["failures"]["test_models.py::test_net"]["export"]["signature"] == \
        "UserError: constraints violated (W): (W % 2) == 0"


# ---- the CLI: output paths and hand-edited reports --------------------------------------------------------------

def _report(tmp_path, case: dict) -> None:
    (tmp_path / "report.json").write_text(json.dumps({"version": 1, "torch": "2.13.0+cpu", "cases": [case]}))
    (tmp_path / "baseline.json").write_text(json.dumps({"version": 2, "failures": {}, "non_core_ops": {}}))


FAILING = {"nodeid": "t.py::c", "outcome": "failed",
           "stages": {"compare": {"status": "failed", "message": "planted", "signature": "mismatch"}},
           "shapes": [{"input": "x", "axis": 0, "declared": "Dim('n', min=2, max=8)", "declared_range": [2, 8],
                       "achieved": "s0", "achieved_range": [2, 8], "status": "kept"}]}


@pytest.mark.parametrize("argv, option", [
    (["merge", "{report}", "-o", "{file}/merged.json"], "-o"),
    (["merge", "{report}", "-o", "{dir}"], "-o"),
    (["durations", "{report}", "-o", "{file}/d.json"], "-o"),
    (["durations", "{report}", "-o", "{dir}"], "-o"),
    (["gate", "{report}", "--baseline", "{baseline}", "--markdown", "{file}/s.md"], "--markdown"),
    (["gate", "{report}", "--baseline", "{baseline}", "--markdown", "{dir}"], "--markdown"),
])
def test_every_cli_output_path_error_is_one_line_and_exit_status_4(tmp_path, capsys, argv, option):
    _report(tmp_path, FAILING)
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    paths = {"report": tmp_path / "report.json", "baseline": tmp_path / "baseline.json", "file": tmp_path / "afile",
             "dir": tmp_path / "adir"}
    with pytest.raises(SystemExit) as exc:
        main([a.format(**paths) for a in argv])
    out, err = capsys.readouterr()
    assert exc.value.code == 4 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"pytest-export: {option} "), err
    assert "Traceback" not in err and ("is a file" in err or "is a directory" in err), err


def test_github_step_summary_that_cannot_be_written_is_a_usage_error(tmp_path, capsys, monkeypatch):
    _report(tmp_path, FAILING)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))
    with pytest.raises(SystemExit) as exc:
        main(["gate", str(tmp_path / "report.json"), "--baseline", str(tmp_path / "baseline.json")])
    assert exc.value.code == 4 and "$GITHUB_STEP_SUMMARY" in capsys.readouterr().err


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=6)
ROW_KEYS = list(FAILING["shapes"][0])


@st.composite
def edited_shapes(draw):
    """The report's ``shapes`` as a hand edit leaves it: a field dropped, or given another value."""
    rows = [dict(FAILING["shapes"][0])]
    how = draw(st.sampled_from(["drop", "value", "row", "whole"]))
    key = draw(st.sampled_from(ROW_KEYS))
    if how == "drop":
        del rows[0][key]
    elif how == "value":
        rows[0][key] = draw(JSON)
    elif how == "row":
        rows[0] = draw(JSON)
    else:
        return draw(JSON)
    return rows


@settings(max_examples=80, deadline=None)
@given(shapes=edited_shapes())
def test_a_hand_edited_shapes_field_is_a_usage_error_or_read_never_a_traceback(tmp_path_factory, shapes):
    tmp_path = tmp_path_factory.mktemp("gate")
    _report(tmp_path, {**FAILING, "shapes": shapes})
    try:
        rc = main(["gate", str(tmp_path / "report.json"), "--baseline", str(tmp_path / "baseline.json")])
    except SystemExit as exc:
        rc = exc.code
    # the case is a new failure, so the gate reads its shapes table: it does, or refuses the report as the schema
    # does; any other exception fails this test
    assert rc == (4 if case_problem({**FAILING, "shapes": shapes}) else 1)
