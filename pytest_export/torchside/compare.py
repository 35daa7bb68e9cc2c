"""Comparison of pytrees of results with torch.testing, recording the size of every error."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.utils._pytree as pytree

from .modstate import widened
from ..util import HarnessError


class CannotCompare(HarnessError):
    """A value the harness has no way to compare: the stage is an ``error``, not a failure of the model."""


class Mismatch(Exception):
    def __init__(self, message: str, errors: list[dict[str, Any]]):
        super().__init__(message)
        self.errors = errors

    def worst(self) -> dict[str, float]:
        return {
            "max_abs_error": max((e.get("max_abs_error", 0.0) for e in self.errors), default=0.0),
            "max_rel_error": max((e.get("max_rel_error", 0.0) for e in self.errors), default=0.0),
        }


# elements compared at a time: a language model's logits at its max sequence are 65M floats, and the error
# statistics in float64 would hold several copies of them at once (issue #31: the memory of a raw check)
CHUNK = 1 << 18


def _chunks(actual: torch.Tensor, expected: torch.Tensor):
    """The two tensors' elements, flattened, as pairs of slices of at most ``CHUNK`` elements."""
    a, e = _dense(actual.detach()).reshape(-1), _dense(expected.detach()).reshape(-1)
    for i in range(0, a.numel(), CHUNK):
        yield a[i:i + CHUNK], e[i:i + CHUNK]


def _leaf_errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float, int]:
    """(max abs error, max rel error, how many elements differ by a NaN or an infinity): a NaN against a number is
    an infinite error, never 0 (issue #44)."""
    if actual.numel() == 0 or actual.shape != expected.shape:
        return 0.0, 0.0, 0
    max_abs, max_rel, any_nz, nonfinite = 0.0, 0.0, False, 0
    for a, e in _chunks(actual, expected):
        a, e = a.to("cpu"), e.to("cpu")
        wide = torch.complex128 if a.is_complex() or e.is_complex() else torch.float64
        a, e = a.to(wide), e.to(wide)
        same = (a == e) | (torch.isnan(a) & torch.isnan(e))
        odd = ~same & ~(torch.isfinite(a) & torch.isfinite(e))
        nonfinite += int(odd.sum())
        diff = torch.where(same, 0.0, (a - e).abs().to(torch.float64))
        diff = torch.where(odd, math.inf, diff)
        max_abs = max(max_abs, float(diff.max()))
        denom = e.abs()
        nz = denom > 0
        if bool(nz.any()):
            any_nz, max_rel = True, max(max_rel, float((diff[nz] / denom[nz]).max()))
        if bool(odd.any()):
            max_rel = math.inf
    return max_abs, (max_rel if any_nz else (0.0 if max_abs == 0 else math.inf)), nonfinite


def _close(a: torch.Tensor, e: torch.Tensor, tolerances: dict[str, float]) -> bool:
    """Whether ``assert_close`` passes, decided slice by slice (its test is ``isclose``'s, elementwise) for two
    floating or complex tensors alike in all but values; False where it must decide (and say why) itself."""
    if not (a.layout == e.layout == torch.strided and a.dtype == e.dtype and a.device == e.device
            and a.shape == e.shape and (a.is_floating_point() or a.is_complex()) and not a.is_quantized):
        return False
    rtol, atol = (tolerances["rtol"], tolerances["atol"]) if tolerances else default_tolerances(e)
    return all(bool(torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True).all()) for x, y in _chunks(a, e))


def _dense(t: torch.Tensor) -> torch.Tensor:
    """Sparse (COO, CSR, ...) as dense, quantized as the floats it stands for: the error statistics need
    elementwise ops that sparse and quantized kernels lack (issue #58)."""
    return widened(t.to_dense() if t.layout != torch.strided else t)


def default_tolerances(value: Any) -> tuple[float, float]:
    """``(rtol, atol)`` that ``torch.testing.assert_close`` uses for this value's dtype."""
    # private: torch.testing has no public table of its defaults, and the dtype rule must be torch's own
    from torch.testing._comparison import default_tolerances as _defaults

    dtype = value.dtype if isinstance(value, torch.Tensor) else torch.as_tensor(value).dtype
    return _defaults(dtype)


def tolerances_for(value: Any, rtol: float | None, atol: float | None) -> dict[str, float]:
    """The keywords for ``assert_close``: none (its defaults), or both, the one not given at its dtype default
    (giving only ``rtol`` must not make ``atol`` 0; issue #18)."""
    if rtol is None and atol is None:
        return {}
    if rtol is None or atol is None:
        d_rtol, d_atol = default_tolerances(value)
        rtol = d_rtol if rtol is None else rtol
        atol = d_atol if atol is None else atol
    return {"rtol": rtol, "atol": atol}


# A float output whose elements miss torch.testing's tolerances still agrees at its scale where the norm of the
# difference is this small beside the norm of eager's output (by dtype): the noise of summing in another order
# (another kernel, a decomposition) grows with a model's depth and with its outputs' magnitude, element by element,
# but stays this small over the whole output; a wrong kernel (tanh- vs exact-GELU: 1e-4 of the norm) does not
# (issue #54). Only where no rtol/atol was given: given ones are held element by element.
NORM_RTOL = {torch.float64: 1e-10, torch.complex128: 1e-10, torch.float32: 1e-5, torch.complex64: 1e-5,
             torch.float16: 1e-3, torch.bfloat16: 8e-3}


def norm_error(actual: torch.Tensor, expected: torch.Tensor) -> float | None:
    """``||actual - expected|| / ||expected||`` (2-norms over every element, in float64, a chunk at a time), for two
    floating or complex tensors of one shape; None for others."""
    if not (actual.shape == expected.shape and (actual.is_floating_point() or actual.is_complex())
            and (expected.is_floating_point() or expected.is_complex()) and actual.numel()):
        return None
    diff = ref = 0.0
    for a, e in _chunks(actual, expected):
        wide = torch.complex128 if a.is_complex() or e.is_complex() else torch.float64
        a, e = a.to("cpu", wide), e.to("cpu", wide)
        diff += float(((a - e).abs() ** 2).sum())
        ref += float((e.abs() ** 2).sum())
    if not (math.isfinite(diff) and math.isfinite(ref)):
        return None
    return math.sqrt(diff / ref) if ref else (0.0 if diff == 0 else math.inf)


# Where a float output misses both rules above by little (its norm-relative error within NEAR times the scale rule's
# limit) and no rtol/atol was given, eager's own noise is measured: eager again in float64 is the reference, and the
# program passes where its error against that reference is at most NOISE_MULTIPLIER times eager's own, plus a tenth
# of the scale rule's limit (the rule torch's own accuracy checks use against a float64 run, issue #54).
NEAR = 100.0
NOISE_MULTIPLIER = 2.0


def near_noise(errors: list[dict[str, Any]]) -> bool:
    """Whether every bad leaf of a mismatch is a float output that misses the scale rule by at most ``NEAR`` times
    its limit: the mismatch eager's own noise may explain."""
    return bool(errors) and all(
        "scale_limit" in e and not e.get("nonfinite") and e.get("norm_rel_error", math.inf) <= NEAR * e["scale_limit"]
        for e in errors)


def noise_text(entry: dict[str, Any]) -> str:
    """Eager's own noise, as measured for a leaf (or why it was not)."""
    if "eager_noise" in entry:
        return (f"; eager's own noise (float32 eager against float64 eager) is {entry['eager_noise']:.3g} of the norm, "
                f"the program's error against float64 eager {entry['error_vs_float64']:.3g}, held to "
                f"{NOISE_MULTIPLIER:g}x eager's noise + {entry['scale_limit'] / 10:.0e}")
    return f"; eager's own noise not measured: {entry['noise_unmeasured']}" if "noise_unmeasured" in entry else ""


def tolerance_text(e: torch.Tensor, rtol: float | None, atol: float | None, scale: float | None,
                   noise: str = "") -> str:
    """What the output was held to, and the keywords that change it."""
    r, a = (tolerances_for(e, rtol, atol) or dict(zip(("rtol", "atol"), default_tolerances(e)))).values()
    given = "given" if rtol is not None or atol is not None else f"torch.testing's for {e.dtype}"
    text = f"held to rtol={r:.3g}, atol={a:.3g} ({given})"
    if scale is not None and rtol is None and atol is None and e.dtype in NORM_RTOL:
        text += (f", or at the output's scale to a norm-relative error of {NORM_RTOL[e.dtype]:.0e}: it is "
                 f"{scale:.3g}")
    return text + noise + "; rtol= and atol= in the exportable marker change the tolerances"


def _noise(a: torch.Tensor, e: torch.Tensor, r: Any, entry: dict[str, Any]) -> bool:
    """Measure a leaf against eager's float64 run ``r`` (a reason string where there is none); whether the
    program's error is within eager's own noise."""
    if isinstance(r, str):
        entry["noise_unmeasured"] = r
        return False
    own = norm_error(e, r) if isinstance(r, torch.Tensor) else None
    prog = norm_error(a, r) if own is not None else None
    if own is None or prog is None:
        entry["noise_unmeasured"] = "float64 eager gave no float output of this shape here"
        return False
    entry.update(eager_noise=own, error_vs_float64=prog)
    return prog <= NOISE_MULTIPLIER * own + entry["scale_limit"] / 10


_PLAIN = (int, float, complex, bool, str, bytes, type(None))


def _attribute_tree(obj: Any) -> dict[str, Any] | None:
    """An object that is no pytree node, by its attributes (public ones; all but dunders when it has none)."""
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict):
        return None
    public = {k: v for k, v in attrs.items() if not k.startswith("_")}
    return public or {k: v for k, v in attrs.items() if not k.startswith("__")}


def _has_eq(obj: Any) -> bool:
    return type(obj).__eq__ is not object.__eq__


def _cannot(obj: Any, where: str) -> CannotCompare:
    t = type(obj)
    return CannotCompare(
        f"cannot compare {t.__module__}.{t.__qualname__} at {where}: register it as a pytree node "
        "(torch.utils._pytree.register_pytree_node / register_dataclass)")


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal with the same dtype, device, layout and shape: every check of ``assert_close`` holds."""
    return (a.layout == b.layout == torch.strided and a.dtype == b.dtype and a.device == b.device
            and a.shape == b.shape and not a.is_quantized and not b.is_quantized
            and bool(torch.equal(widened(a), widened(b))))


def _kids(spec: Any) -> list[Any]:
    return list(spec.children()) if hasattr(spec, "children") else list(spec.children_specs)


def _node_type(spec: Any) -> Any:
    # torch.Size is a tuple of ints: export returns it as a plain tuple, equal to eager's (issue #24)
    return tuple if spec.type is torch.Size else spec.type


def same_structure(a: Any, e: Any) -> bool:
    """Whether two ``TreeSpec``s have the same structure, ``torch.Size`` and ``tuple`` alike."""
    if a.is_leaf() or e.is_leaf():
        return a.is_leaf() and e.is_leaf()
    if _node_type(a) is not _node_type(e) or len(_kids(a)) != len(_kids(e)):
        return False
    if a.context != e.context and _node_type(a) is not tuple:
        return False
    return all(same_structure(x, y) for x, y in zip(_kids(a), _kids(e)))


def _describe_node(spec: Any) -> str:
    if spec.is_leaf():
        return "a leaf"
    kind = spec.context if isinstance(spec.context, type) else spec.type  # a namedtuple's class is its context
    name = getattr(kind, "__qualname__", str(kind))
    n = len(_kids(spec))
    if isinstance(spec.context, (list, tuple)) and spec.context and spec.type is not tuple:
        return f"{name} with keys {list(spec.context)!r}"
    return f"{name} of {n} entr{'y' if n == 1 else 'ies'}"


def structure_difference(a: Any, e: Any, where: str = "") -> str | None:
    """Where and how two ``TreeSpec``s first differ (the node's type, its length or its keys), as ``path: the
    program gives X, eager gives Y``; None where they agree."""
    if same_structure(a, e):
        return None
    if a.is_leaf() or e.is_leaf() or _node_type(a) is not _node_type(e) or len(_kids(a)) != len(
            _kids(e)) or (a.context != e.context and _node_type(a) is not tuple):
        return f"{where or 'the root'}: exported gives {_describe_node(a)}, eager gives {_describe_node(e)}"
    keys = list(a.context) if isinstance(a.context, (list, tuple)) and len(a.context) == len(_kids(a)) \
        else list(range(len(_kids(a))))
    for key, x, y in zip(keys, _kids(a), _kids(e)):
        found = structure_difference(x, y, f"{where}[{key!r}]")
        if found:
            return found
    return f"{where or 'the root'}: exported gives {pytree.treespec_pprint(a)}, eager gives {pytree.treespec_pprint(e)}"


def compare_trees(actual: Any, expected: Any, *, rtol: float | None = None, atol: float | None = None,
                  root: str = "output", reference: Any = None) -> dict[str, float]:
    """Compare every leaf; raise Mismatch listing each bad path, else return the max abs/rel errors.
    ``reference``: eager's float64 run of the same call (a tree like ``expected``), or why there is none (a
    string); a float leaf near the tolerances is then judged against eager's own noise (``NOISE_MULTIPLIER``)."""
    a_leaves, a_spec = pytree.tree_flatten_with_path(actual)
    e_leaves, e_spec = pytree.tree_flatten_with_path(expected)
    if not same_structure(a_spec, e_spec):
        raise Mismatch(f"{root}: structure differs at {structure_difference(a_spec, e_spec, root)}",
                       [{"path": root, "message": "structure differs"}])
    r_leaves: list[Any] = [reference] * len(e_leaves) if isinstance(reference, str) or reference is None else [
        x for _, x in pytree.tree_flatten_with_path(reference)[0]]
    if len(r_leaves) != len(e_leaves):
        r_leaves = ["float64 eager gave another structure of outputs"] * len(e_leaves)
    errors: list[dict[str, Any]] = []
    noise: dict[str, float] = {}
    worst_abs = worst_rel = 0.0
    for ((path, a), (_, e)), r in zip(zip(a_leaves, e_leaves), r_leaves):
        where = root + pytree.keystr(path)
        entry: dict[str, Any] = {"path": where}
        try:
            if isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor):
                if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor):
                    if _identical(a, e):  # the usual case: no error to measure, nothing for assert_close to say
                        continue
                    mabs, mrel, odd = _leaf_errors(a, e)
                    worst_abs, worst_rel = max(worst_abs, mabs), max(worst_rel, mrel)
                    entry.update(max_abs_error=mabs, max_rel_error=mrel)
                    if odd:
                        entry["nonfinite"] = odd
                    if _close(a, e, tolerances_for(e, rtol, atol)):
                        continue  # assert_close, run whole, is what says how a mismatch looks
                    scale = norm_error(a, e)
                    if scale is not None:
                        entry["norm_rel_error"] = scale
                        if (rtol is None and atol is None and not odd and a.dtype == e.dtype and a.device == e.device
                                and a.layout == e.layout == torch.strided and e.dtype in NORM_RTOL):
                            entry["scale_limit"] = NORM_RTOL[e.dtype]
                            if scale <= NORM_RTOL[e.dtype]:
                                entry["within_scale"] = True  # reduction-order noise at the output's scale (#54)
                                continue
                            if reference is not None and _noise(a, e, r, entry):
                                # no further from float64 eager than eager itself is (#54): said in the stage's data
                                for k in ("eager_noise", "error_vs_float64"):
                                    noise[k] = max(noise.get(k, 0.0), entry[k])
                                continue
                    try:
                        torch.testing.assert_close(a, e, equal_nan=True, **tolerances_for(e, rtol, atol))
                    except AssertionError as exc:
                        text = tolerance_text(e, rtol, atol, scale, noise_text(entry))
                        raise AssertionError(f"{exc}\n{text}") from None
                    continue
                torch.testing.assert_close(a, e, equal_nan=True, **tolerances_for(
                    e if isinstance(e, torch.Tensor) else a, rtol, atol))
            elif isinstance(e, (int, float, complex)) and not isinstance(e, bool):
                torch.testing.assert_close(a, e, equal_nan=True, **tolerances_for(e, rtol, atol))
                if isinstance(a, (int, float)):
                    d = abs(a - e)
                    worst_abs = max(worst_abs, d)
                    worst_rel = max(worst_rel, d / abs(e) if e else (0.0 if d == 0 else math.inf))
            elif isinstance(e, _PLAIN) or isinstance(a, _PLAIN):
                if a != e:
                    raise AssertionError(f"values differ: exported {a!r}, eager {e!r}")
            elif type(a) is not type(e):
                raise AssertionError(f"types differ: exported {type(a).__qualname__}, eager {type(e).__qualname__}")
            elif a is e:
                continue
            else:
                # not a pytree node (a cache object a model returns): compare what it holds, attribute by attribute
                ta, te = _attribute_tree(a), _attribute_tree(e)
                if ta is not None and te is not None:
                    try:
                        errs = compare_trees(ta, te, rtol=rtol, atol=atol, root=where)
                    except Mismatch as inner:
                        errors.extend(inner.errors)
                        continue
                    worst_abs, worst_rel = max(worst_abs, errs["max_abs_error"]), max(worst_rel, errs["max_rel_error"])
                elif _has_eq(e):
                    if not bool(a == e):
                        raise AssertionError(f"values differ: exported {a!r}, eager {e!r}")
                else:
                    raise _cannot(e, where)
        except AssertionError as exc:
            entry["message"] = str(exc).strip()
            errors.append(entry)
    if errors:
        lines = []
        for err in errors:
            head = f"{err['path']}: "
            if "max_abs_error" in err:
                head += f"max abs error {err['max_abs_error']:.3g}, max rel error {err['max_rel_error']:.3g}"
                if err.get("nonfinite"):
                    head += f" ({err['nonfinite']} element{'s' * (err['nonfinite'] != 1)} NaN or infinite on one side)"
                head += ": "
            lines.append(head + err["message"].replace("\n", "\n    "))
        raise Mismatch("\n".join(lines), errors)
    return {"max_abs_error": worst_abs, "max_rel_error": worst_rel, **noise}


def compare_leaves(actual: Any, expected: Any, tolerance: Any, root: str = "output") -> dict[str, float]:
    """Leaf by leaf, each at ``tolerance(leaf)`` -> ``(rtol, atol)`` (None keeps torch.testing's for that one):
    tolerances by dtype, as a device or a runtime whose kernels sum in another order needs. Mismatch lists every
    bad leaf with the tolerance it was held to; else the max abs/rel errors."""
    g_leaves, g_spec = pytree.tree_flatten_with_path(actual)
    w_leaves, w_spec = pytree.tree_flatten_with_path(expected)
    if not same_structure(g_spec, w_spec):
        compare_trees(actual, expected, root=root)  # raises the structure mismatch
    worst = {"max_abs_error": 0.0, "max_rel_error": 0.0}
    errors: list[dict[str, Any]] = []
    messages: list[str] = []
    for (path, g), (_, w) in zip(g_leaves, w_leaves):
        r, a = tolerance(w)
        try:
            errs = compare_trees(g, w, rtol=r, atol=a, root=root + pytree.keystr(path))
            worst = {k: max(worst[k], errs[k]) for k in worst}
        except Mismatch as exc:
            errors += exc.errors
            if isinstance(w, torch.Tensor):
                r, a = tolerances_for(w, r, a).values() if r is not None or a is not None else default_tolerances(w)
                messages.append(f"{exc} (rtol={r:.3g}, atol={a:.3g})")
            else:
                messages.append(str(exc))
    if errors:
        raise Mismatch("\n".join(messages), errors)
    return worst
