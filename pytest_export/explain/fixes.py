"""The declaration a program really accepts, offered after a ``guards`` failure, and checked before it is offered.

``propose`` reads the probes: each declared dim whose in-range sizes the program refused gets the range it accepted
around the example, the multiple a ``... % N == 0`` guard demands (a derived dim), or, where export tied axes the
declaration keeps independent, one ``Dim`` shared by them. ``check`` then does what a user would do with it
(issue #24): writes it into the case's ``dynamic_shapes``, exports again and probes the new program across the new
ranges (its bounds always, the sizes between them within the budget). Only a fix that exports and whose program
accepts every probed size is called ready to paste. Where the
accepted sizes interleave with refused ones (only odd sizes), no single ``Dim`` expresses them: the sizes are
named instead of a range.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable

from ..audit import FuzzModel, audit
from ..context import Context
from ..declare.case import input_names
from ..declare.shapes import parse
from ..probes.choose import ACCEPTED, UNCHECKED, run_eager, run_program, sized, spread
from ..proof.narrow import bad_values, narrowings, refused_count
from ..proof.prove import prove
from ..torchside.observe import clone_inputs, preserved_python_state
from ..torchside.torchlog import quiet_trace_logs
from ..util import describe_exception

ENUMERATE = 32  # a range of at most this many sizes is probed size by size
MAX_CHECK_PROBES = 12  # per dim, in a larger range: powers of two across it, beside the bounds
BOUNDS = 4  # the sizes checked whatever the budget: each bound and its neighbour


@dataclasses.dataclass
class Fix:
    """One declared dim (or several, where export tied them) rewritten: ``roots`` it replaces, Python to paste
    (``source``), and ``make``, which builds the new ``Dim`` (or ``k * Dim``) that every axis of those roots takes."""

    roots: list[str]
    source: str
    make: Callable[[], Any]


def _name(root: str) -> str:
    return re.sub(r"\W", "_", root).strip("_") or "d"  # a hint's root is named by its axis path


def propose(ctx: Context, model: FuzzModel, refused: dict[str, list[tuple[int, str]]],
            accepted: dict[str, set[int]]) -> list[Fix]:
    """The ``Dim`` definitions that match what the program accepted, for each declared dim it refused sizes of:
    the range narrowed to the accepted sizes around the example, or, where a guard demands a multiple
    (``... % 4 == 0``), a derived dim (``b = 4 * _b``); for axes export tied, one shared ``Dim``."""
    from torch.export import Dim

    from ..audit import kept_range

    fixes: list[Fix] = []
    done: set[str] = set()
    by_symbol = {v.symbol: v for v in model.vars}
    for v in model.vars:
        group = [by_symbol[s] for s in _tie_group(model, v.symbol) if s in by_symbol]
        if len(group) > 1 and any(refused.get(g.symbol) for g in group) and v.symbol not in done:
            done.update(g.symbol for g in group)
            roots = [n for g in group for n in g.names]
            lo, hi = max(g.lo for g in group), min(g.hi for g in group)
            name = _name(roots[0])
            bounded = not any(g.unbounded for g in group)
            bounds = f"min={lo}" + (f", max={hi}" if bounded else "")
            fixes.append(Fix(roots, f"{name} = Dim('{name}', {bounds})  # one Dim for {' and '.join(roots)}: "
                                    "the program needs them equal",
                             lambda name=name, lo=lo, hi=hi, b=bounded: Dim(name, min=lo, max=hi if b else None)))
    for v in model.vars:
        bad = refused.get(v.symbol)
        if not bad or not v.names or len(v.names) != 1 or v.symbol in done:
            continue
        ok = sorted(x for x in accepted.get(v.symbol, set()) | {v.example} if x is not None)
        name = _name(v.names[0])
        multiple = _multiple(msg for _, msg in bad)
        below = [x for x, _ in bad if x < v.example]
        above = [x for x, _ in bad if x > v.example]
        lo = min((x for x in ok if x > max(below)), default=v.example) if below else v.lo
        hi = max((x for x in ok if x < min(above)), default=v.example) if above else (None if v.unbounded else v.hi)
        # the program's own bounds, where they sit between the probes
        kept = kept_range(ctx.ep, model.symbols[v.symbol])
        if kept and below and max(below) < kept[0] < lo:
            lo = kept[0]
        if kept and above and kept[1] is not None and hi is not None and hi < kept[1] < min(above):
            hi = kept[1]
        if multiple:
            # the refusals are the guard's demand for whole multiples: the declared range, in multiples
            lo, hi = max(v.lo, 1), (None if v.unbounded else v.hi)
            k_lo, k_hi = -(-lo // multiple), (hi // multiple if hi is not None else None)
            bounds = f"min={k_lo}" + (f", max={k_hi}" if k_hi is not None else "")
            fixes.append(Fix(v.names, f"_{name} = Dim('_{name}', {bounds})\n{name} = {multiple} * _{name}",
                             lambda name=name, m=multiple, a=k_lo, b=k_hi: m * Dim(f"_{name}", min=a, max=b)))
        else:
            bounds = f"min={lo}" + (f", max={hi}" if hi is not None else "")
            fixes.append(Fix(v.names, f"{name} = Dim('{name}', {bounds})",
                             lambda name=name, a=lo, b=hi: Dim(name, min=a, max=b)))
    return fixes


def proved_fixes(proof: Any, model: FuzzModel) -> tuple[list[Fix], list[str]]:
    """The fixes the proof's narrowings give (``Dim`` sources to paste), and a line per fix saying exactly what it
    gives up; ``([], [why])`` where no narrowing keeps the promise's spirit."""
    from torch.export import Dim

    chosen, why = narrowings(proof, model)
    if not chosen:
        return [], [why] if why else []
    var = {v.symbol: v for v in model.vars}
    fixes, notes = [], []
    for n in chosen:
        v = var[n.symbol]
        if len(v.names) != 1:
            return [], [f"{'/'.join(v.names)} are one dim in the program: declare one Dim for them"]
        name = _name(v.names[0])
        if n.hi is None:  # a dim without a max keeps none (issue #53)
            fixes.append(Fix(v.names, f"{name} = Dim('{name}', min={n.lo})", lambda name=name, a=n.lo: Dim(name, min=a)))
            notes.append(f"(this fix keeps {'/'.join(v.names)} to [{n.lo}, inf): it gives up the {n.lo - v.lo} "
                         f"declared sizes below {n.lo}, {refused_count(proof, n.symbol)}; of the narrowings of one "
                         "dim, it gives up the fewest)")
            continue
        if n.step == 1:
            fixes.append(Fix(v.names, f"{name} = Dim('{name}', min={n.lo}, max={n.hi})",
                             lambda name=name, a=n.lo, b=n.hi: Dim(name, min=a, max=b)))
            kept = f"[{n.lo}, {n.hi}]"
        else:
            k_lo, k_hi = (n.lo - n.offset) // n.step, (n.hi - n.offset) // n.step
            form = f"{n.step} * _{name}" + (f" + {n.offset}" if n.offset else "")
            fixes.append(Fix(v.names, f"_{name} = Dim('_{name}', min={k_lo}, max={k_hi})\n{name} = {form}",
                             lambda name=name, m=n.step, r=n.offset, a=k_lo, b=k_hi:
                             m * Dim(f"_{name}", min=a, max=b) + r if r else m * Dim(f"_{name}", min=a, max=b)))
            kept = f"the {n.kept} sizes {form} in [{n.lo}, {n.hi}]"
        if v.unbounded:
            notes.append(f"(this fix keeps {'/'.join(v.names)} to {kept}: it gives up every size above {n.hi} of its "
                         f"declared range, which has no max, {refused_count(proof, n.symbol)}; of the narrowings of "
                         "one dim, it gives up the fewest)")
            continue
        total = v.hi - v.lo + 1
        bad = bad_values(proof.solution, n.symbol)
        refused = int(bad.sum()) if bad is not None else "some"
        notes.append(f"(this fix keeps {'/'.join(v.names)} to {kept}: it gives up {total - n.kept} of its {total} "
                     f"declared sizes ({n.lost} of the {proof.solution.size} declared size combinations), though the "
                     f"program refuses {refused} of them; of the narrowings of one dim, it gives up the fewest)")
    return fixes, notes


def tie_lines(model: FuzzModel, refused: dict[str, Any], labels: dict[str, list[str]],
              eager: set[str] = frozenset()) -> list[str]:
    """A line for each tie export made between axes the declaration keeps independent, where the program refuses
    them unequal (``refused``, by symbol) or eager itself raises on them (``eager``: symbols moved by such probes).
    ``labels``: the declared axes of each symbol."""
    out = []
    for origin in dict.fromkeys(model.ties.values()):
        group = _tie_group(model, origin)
        who = ("the program refuses" if any(refused.get(s) for s in group) else
               "eager itself raises on" if eager & set(group) else "")
        if who:
            axes = [lbl for s in group for lbl in labels.get(s, [])]
            out.append(f"tie: export made {' and '.join(axes)} one size, and {who} them unequal; the "
                       "declaration keeps them independent (declare one Dim for them where they must be equal, or "
                       "make the model take unequal sizes)")
    return out


def _tie_group(model: FuzzModel, symbol: str) -> list[str]:
    """The symbols of axes export made one (the program's own symbol first); just ``symbol`` where none."""
    origin = model.ties.get(symbol, symbol)
    return [origin] + [s for s, o in model.ties.items() if o == origin]


def _multiple(messages: Any) -> int | None:
    """``N`` of a refusing guard of the form ``... % N == 0`` (a reshape that needs whole groups of N)."""
    for msg in messages:
        m = re.search(r"% (\d+) == 0", msg or "")
        if m:
            n = int(m.group(1))
            # the guard is on the axis expression (``2 * x.size()[0] % 4``): the dim itself needs n / gcd
            coeff = re.search(r"(\d+) \* \w+\.size\(\)\[\d+\] % ", msg)
            if coeff:
                n //= math.gcd(n, int(coeff.group(1)))
            return n if n > 1 else None
    return None


# ---- checking a fix as a user would use it ------------------------------------------------------------

def rewrite(spec: Any, module: Any, args: tuple, kwargs: dict, new: dict[str, Any]) -> Any | None:
    """``spec`` with the entry of every axis labelled in ``new`` (``x.shape[0]``, ``n`` for an int input, as the
    declaration labels them) replaced; None where not every one was found (a form this cannot mirror)."""
    import torch
    import torch.utils._pytree as pytree

    used: set[str] = set()

    def put(label: str, old: Any) -> Any:
        if label in new:
            used.add(label)
            return new[label]
        return old

    def walk(sub: Any, value: Any, label: str) -> Any:
        if sub is None:
            return None
        if isinstance(value, torch.Tensor):
            if isinstance(sub, dict):
                return {ax: put(f"{label}.shape[{ax}]", d) for ax, d in sub.items()}
            if isinstance(sub, (list, tuple)):
                return type(sub)(put(f"{label}.shape[{i}]", d) for i, d in enumerate(sub))
            return sub
        if isinstance(value, int) and not isinstance(value, bool):
            return put(label, sub)
        node = pytree._get_node_type(value)
        if node not in pytree.SUPPORTED_NODES or pytree.tree_is_leaf(value):
            return sub
        entry = pytree.SUPPORTED_NODES[node]
        if entry.flatten_with_keys_fn is None:
            return sub
        keyed, _ = entry.flatten_with_keys_fn(value)
        if isinstance(sub, dict) and isinstance(value, dict):
            return {k: walk(s, value[k], label + pytree.keystr((pytree.MappingKey(k),))) for k, s in sub.items()}
        if isinstance(sub, (list, tuple)) and len(sub) == len(keyed):
            return type(sub)(walk(s, c, label + pytree.keystr((k,))) for s, (k, c) in zip(sub, keyed))
        return sub

    names = input_names(module, args, kwargs)
    values = list(args) + list(kwargs.values())
    if isinstance(spec, dict):
        out: Any = {k: walk(s, values[names.index(k)], k) if k in names[:len(values)] else s for k, s in spec.items()}
    elif isinstance(spec, (list, tuple)) and len(spec) == len(values):
        out = type(spec)(walk(s, v, n) for s, v, n in zip(spec, values, names))
    else:
        return None
    return out if used == set(new) else None


@dataclasses.dataclass
class Checked:
    ready: bool
    text: str  # the lines for the failure message
    probes: int = 0


def check(ctx: Context, model: FuzzModel, fixes: list[Fix]) -> Checked:
    """Paste ``fixes`` into the case's ``dynamic_shapes``, export again and probe the new program across every
    range it declares: ready only where it exports, keeps the ranges and accepts every probed size."""
    import torch

    source = "\n".join(f.source for f in fixes)
    decl = ctx.declaration
    roots = {r for f in fixes for r in f.roots}
    symbols = {v.symbol for v in model.vars if roots & set(v.names)}
    try:
        made = {f.roots[0]: f.make() for f in fixes}
    except Exception as exc:  # noqa: BLE001 - torch refuses the Dim itself (max not above min)
        return _not_ready(ctx, model, source, f"torch refuses it ({describe_exception(exc, 200).splitlines()[0]})",
                          symbols)
    new: dict[str, Any] = {}
    for f in fixes:
        root = made[f.roots[0]]
        for name in f.roots:
            for ax in decl.axes_of(name):
                new[ax.label] = root if (ax.a, ax.b) == (1, 0) else root * ax.a + ax.b
    case = ctx.case
    spec = rewrite(ctx.export_dynamic_shapes(), case.module, case.args, case.kwargs, new)
    if spec is None:
        return Checked(False, f"fix (not checked: it could not be written into this case's dynamic_shapes; check it "
                              f"before use):\n{source}")
    args, kwargs = clone_inputs((case.args, case.kwargs))
    extra = {}
    if ctx.options.preserve_module_call_signature:
        extra["preserve_module_call_signature"] = tuple(ctx.options.preserve_module_call_signature)
    try:
        with quiet_trace_logs(), preserved_python_state(case.module):
            ep = torch.export.export(case.module, args, kwargs, dynamic_shapes=spec, strict=ctx.options.strict, **extra)
        au = audit(parse(ctx.nodeid, spec, case.module, case.args, case.kwargs), ep, max_size=ctx.options.max_size)
    except Exception as exc:  # noqa: BLE001 - a fix that does not export is not ready
        return _not_ready(ctx, model, source, f"export fails with it ({describe_exception(exc, 300).splitlines()[0]})",
                          symbols)
    if au.failures or au.errors:
        return _not_ready(ctx, model, source, f"export does not keep it ({(au.failures + au.errors)[0]})", symbols)
    names = {getattr(getattr(m, "root", m), "__name__", None) for m in made.values()}
    fixed = [v for v in au.model.vars if names & set(v.names)]
    same = _same_or_constant(model, fixed, roots, shared=any(len(f.roots) > 1 for f in fixes))
    if same:
        return Checked(False, f"no fix to paste: {same}")
    proof = prove(ep, au.model)
    if proof is None:
        return Checked(False, "fix (not proved: torch kept no record of the program's guards to decide them over "
                              f"the fix's sizes; check it before use):\n{source}")
    if proof.refusals():
        return _not_ready(ctx, model, source, "its program's guards still refuse "
                          + proof.refused_text(proof.refusals()[0]), symbols)
    if not proof.proved:
        return Checked(False, f"fix (not proved: {proof.line()}; check it before use):\n{source}")
    # the guards are proved; what no guard says (a kernel that raises at a size) is probed at each bound
    probes, refused = 0, []
    for v in fixed:
        ok, bad, _ = _probe_sizes(ctx, au.model, ep, v, bounds_only=True)
        probes += len(ok) + len(bad)
        refused += [f"{'/'.join(v.names)}={size}" for size in bad]
    if refused:
        return _not_ready(ctx, model, source, f"its program still refuses {', '.join(refused[:6])}", symbols)
    n = len(proof.solution.decided)
    held = (f"its program's {n} guard{'s' * (n != 1)} hold at all {proof.solution.size} sizes it keeps" if n else
            f"its program keeps no guard on them: all {proof.solution.size} sizes it keeps are accepted")
    return Checked(True, f"fix: what the program really accepts, ready to paste (proved: exported again with it, "
                         f"{held}, "
                         f"and its {probes} bound sizes ran; or make the model accept the declared range):\n{source}",
                   probes)


def _same_or_constant(model: FuzzModel, fixed: list[Any], roots: set[str], shared: bool = False) -> str:
    """Why a fix is none: it declares what was declared, or it turns a declared dynamic dim into one size."""
    def new_name(old: str) -> set[str]:
        return {old, _name(old), f"_{_name(old)}"}

    before = {n: (v.lo, v.hi) for v in model.vars for n in v.names if n in roots}
    after = {n: (v.lo, v.hi) for v in fixed for n in v.names}
    gone = [] if shared else sorted(r for r in before if not any(new_name(r) & set(v.names) for v in fixed))
    same = not shared and bool(before) and all(any(before[r] == after.get(m) for m in new_name(r)) for r in before)
    if any(lo == hi for lo, hi in after.values()) or gone:
        return ("it would turn a declared dynamic dim into a constant"
                + (f" ({', '.join(gone)})" if gone else "") + "; the promise is the range: change the model instead")
    if same:
        return "it is the declaration itself: the program refuses sizes inside it; change the model instead"
    return ""


_SPENT = "the budget for probing was spent (--export-budget / budget= raises it)"


def _sizes(lo: int, hi: int) -> list[int]:
    """Sizes to probe in ``[lo, hi]``, the bounds first: every one of a small range, else the bounds, their
    neighbours and powers of two across it."""
    sizes = range(lo, hi + 1) if hi - lo < ENUMERATE else {lo, lo + 1, hi - 1, hi, *spread(lo, hi, MAX_CHECK_PROBES)}
    bounds = [x for x in dict.fromkeys((lo, hi, lo + 1, hi - 1)) if lo <= x <= hi]
    return bounds + sorted(x for x in sizes if x not in bounds)


def _probe_sizes(ctx: Context, model: FuzzModel, ep: Any, v: Any,
                 bounds_only: bool = False) -> tuple[list[int], list[int], bool]:
    """(sizes of ``v`` the program accepts, sizes it refuses where eager runs, whether the budget cut the list),
    the other dims at the example's sizes. A size eager itself cannot take counts as neither."""
    base = model.example_values()
    ok, bad = [], []
    for i, size in enumerate(_sizes(v.lo, v.hi)):
        if i >= BOUNDS and (bounds_only or ctx.calibration.costs().spent()):  # a fix offered is checked at its bounds at least (#33)
            return sorted(ok), sorted(bad), True
        probe = sized(ctx, model, {**base, v.symbol: size}, record=False)
        got = run_program(ctx, ep, probe)
        if got.status == UNCHECKED:
            continue
        if got.status == ACCEPTED:
            ok.append(size)
        elif run_eager(ctx, probe).status == ACCEPTED:
            bad.append(size)
    return sorted(ok), sorted(bad), False


def _not_ready(ctx: Context, model: FuzzModel, source: str, why: str, symbols: set[str] | None = None) -> Checked:
    """A fix that fails its check: said so, with the sizes the program accepts where no ``Dim`` expresses them."""
    lines = [f"no fix to paste: the range the probes suggest fails when pasted back: {why}:",
             *("    " + ln for ln in source.splitlines())]
    lines += accepted_sizes(ctx, model, symbols)
    return Checked(False, "\n".join(lines))


def accepted_sizes(ctx: Context, model: FuzzModel, symbols: set[str] | None = None) -> list[str]:
    """For each dim (of ``symbols``, default all) whose accepted sizes interleave with refused ones (only odd
    sizes), a line naming them: no single ``Dim`` (a range, or a multiple) expresses that."""
    out = []
    for v in model.vars:
        if symbols is not None and v.symbol not in symbols:
            continue
        ok, bad, cut = _probe_sizes(ctx, model, ctx.ep, v)
        if not bad or not ok or not any(min(ok) < b < max(ok) for b in bad):
            continue
        probed = len(ok) + len(bad)
        every = "every size" if probed == v.hi - v.lo + 1 else f"{probed} sizes" + (f", before {_SPENT}" if cut else "")
        out.append(f"no single Dim expresses what the program accepts: of {'/'.join(v.names)} in [{v.lo}, {v.hi}] "
                   f"({every} probed) it accepts {_list(ok)} and refuses {_list(bad)}")
    return out


def _list(sizes: list[int], limit: int = 16) -> str:
    return ", ".join(map(str, sizes[:limit])) + (f", ... ({len(sizes)} in all)" if len(sizes) > limit else "")


__all__ = ["Fix", "Checked", "propose", "check", "rewrite", "accepted_sizes", "tie_lines"]
