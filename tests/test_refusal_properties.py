"""Property tests of ``refusal.explain`` (issue #33) over export-like guard records built by hand: a guard on two
dims together is a relation blamed on both, never on one alone, and every "accepted with" it names holds; a guard
on one dim blames that dim; a guard that holds at the probe is never named; export's substitution for a derived
dim is never named."""

from __future__ import annotations

import types

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_export.explain.refusal import explain
from pytest_export.proof import guardsource

A, B, ROOT = sympy.symbols("s0 s1 s2", integer=True, positive=True)


class Program:
    """Stands in for an ExportedProgram: ``explain`` reads its guards through ``record_of``."""


def _setup(guards, lo, hi, example, replacements=None):
    ep = Program()
    hints = {A: sympy.Integer(example[0]), B: sympy.Integer(example[1])}
    guardsource._RECORDS[ep] = guardsource.Recorded([(g, f"model.py:{i + 1} in forward: `if ...:`")
                                                     for i, g in enumerate(guards)], replacements or {}, hints)
    variables = [types.SimpleNamespace(symbol=str(s), names=[n], example=e, lo=lo, hi=hi)
                 for s, n, e in ((A, "h", example[0]), (B, "w", example[1]))]
    model = types.SimpleNamespace(symbols={str(A): A, str(B): B}, vars=variables)
    return ep, model


sizes = st.integers(2, 40)


@settings(max_examples=60, deadline=None)
@given(a=sizes, b=sizes, ea=sizes, eb=sizes)
def test_a_product_refused_at_one_value_is_a_relation_of_both_dims(a, b, ea, eb):
    ep, model = _setup([sympy.Ne(A * B, a * b)], 2, 40, (ea, eb))
    why = explain(ep, model, {str(A): a, str(B): b})
    assert why is not None and why.relation and set(why.symbols) == {str(A), str(B)}
    assert why.where == [f"h*w == {a * b}"]
    for claim in why.alone:  # each "accepted with" names sizes at which the guard holds
        name, rest = claim.split("=", 1)
        size = int(rest.split(" ", 1)[0])
        if " is accepted with " in claim:
            other, other_size = claim.split(" is accepted with ")[1].split("=")
            values = {name: size, other: int(other_size)}
            assert values["h"] * values["w"] != a * b, claim


@settings(max_examples=60, deadline=None)
@given(limit=sizes, a=sizes, b=sizes)
def test_a_guard_on_one_dim_blames_that_dim_and_a_holding_guard_is_never_named(limit, a, b):
    ep, model = _setup([sympy.Le(A, limit), sympy.Ne(B, 1)], 2, 40, (2, 2))
    why = explain(ep, model, {str(A): a, str(B): b})
    if a <= limit:
        assert why is None  # every guard holds there: nothing to name
    else:
        assert why is not None and why.symbols == [str(A)] and not why.relation
        assert why.where == [f"h > {limit}"] and why.sources == ["model.py:1 in forward: `if ...:`"]


@given(k=st.integers(2, 8), r=st.integers(2, 10))
def test_exports_substitution_for_a_derived_dim_is_never_named(k, r):
    """export replaced s0 by k*s2 and kept ``Eq(s0, k*s2)`` among its guards: ``record_of`` drops it, and at a
    refused probe only the model's own guard is named, in the root's name."""
    frame = types.SimpleNamespace(filename="/elsewhere/model.py", lineno=7, name="forward", line="if x.shape[0] == 8:")
    sloc = types.SimpleNamespace(framework_loc=frame, maybe_user_loc=None)
    env = types.SimpleNamespace(guards=[types.SimpleNamespace(expr=sympy.Eq(A, k * ROOT), sloc=sloc),
                                        types.SimpleNamespace(expr=sympy.Ne(A, k * r), sloc=sloc)],
                                replacements={A: k * ROOT}, backed_var_to_val={A: k * 2, ROOT: 2, B: 3})
    ep = Program()
    original = guardsource.shape_env_of
    guardsource.shape_env_of = lambda program: env
    try:
        rec = guardsource.record_of(ep)
    finally:
        guardsource.shape_env_of = original
    assert [str(g) for g, _ in rec.guards] == [str(sympy.Ne(A, k * r))]
    variables = [types.SimpleNamespace(symbol=str(ROOT), names=["n"], example=2, lo=1, hi=50),
                 types.SimpleNamespace(symbol=str(B), names=["w"], example=3, lo=2, hi=40)]
    model = types.SimpleNamespace(symbols={str(ROOT): ROOT, str(B): B}, vars=variables)
    why = explain(ep, model, {str(ROOT): r, str(B): 3})
    assert why is not None and why.where == [f"{k}*n == {k * r}"] and why.symbols == [str(ROOT)]
    assert why.sources == ["/elsewhere/model.py:7 in forward: `if x.shape[0] == 8:`"]
