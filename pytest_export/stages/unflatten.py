"""Stage ``unflatten``: for a case that gives ``preserve_module_call_signature``, the program is unflattened back
into the module hierarchy, and every preserved submodule can be swapped for its eager original.

``torch.export.unflatten(ep)`` must give a module that agrees with eager on the example inputs. A preserved
call signature is the promise that the submodule's boundary survives export: putting the eager submodule in
its place must keep the outputs. Where the unflattened module disagrees with eager (or ``compare`` already
failed), each swap says whether the defect lies inside that submodule: the eager original fixes it.
"""

from __future__ import annotations

from typing import Any

from ..context import Context, Stage, StageFailure
from ..probes.choose import mismatch
from ..results import FAILED, PASSED, XFAILED
from ..torchside.observe import observe
from ..util import describe_exception, plural


def _run(ctx: Context, module: Any) -> Any:
    return observe(module, module, ctx.case.args, ctx.case.kwargs, ctx.keeper, grad=ctx.options.grad)


def run(ctx: Context) -> dict[str, Any]:
    import torch

    fqns = ctx.options.preserve_module_call_signature
    import warnings

    try:
        with warnings.catch_warnings():
            # torch's own unflatten inserts the call-spec attributes this way; not the user's concern
            warnings.filterwarnings("ignore", message="Attempted to insert a get_attr Node", category=UserWarning)
            unflat = torch.export.unflatten(ctx.ep)
    except Exception as exc:  # noqa: BLE001
        raise StageFailure(f"torch.export.unflatten raised: {describe_exception(exc)}", exception=type(exc).__name__)
    eager = ctx.reference()
    try:
        got = _run(ctx, unflat)
    except Exception as exc:  # noqa: BLE001
        raise StageFailure(f"the unflattened module raised on the example inputs: {describe_exception(exc)}",
                           exception=type(exc).__name__)
    wrong = mismatch(ctx, got, eager, inputs=(ctx.case.args, ctx.case.kwargs))
    # only a failed compare says the program is wrong; a compare skipped on request says nothing (issue #24)
    compare = ctx.result.stage_status("compare")
    exported_ok = compare not in (FAILED, XFAILED)
    problems: list[str] = []
    if wrong and exported_ok:
        agrees = " (the exported program agrees)" if compare == PASSED else ""
        problems.append(f"the unflattened module disagrees with eager{agrees}:\n{wrong}")
    swaps: dict[str, str] = {}
    for fqn in fqns:
        exported_sub = unflat.get_submodule(fqn)
        unflat.set_submodule(fqn, ctx.case.module.get_submodule(fqn))
        try:
            swapped = _run(ctx, unflat)
        except Exception as exc:  # noqa: BLE001
            swaps[fqn] = "raised"
            problems.append(f"with the eager `{fqn}` swapped in, the unflattened module raised: {describe_exception(exc)}"
                            " (the preserved call signature does not fit the eager submodule)")
            continue
        finally:
            unflat.set_submodule(fqn, exported_sub)
        bad = mismatch(ctx, swapped, eager, inputs=(ctx.case.args, ctx.case.kwargs))
        if wrong is None and bad is None:
            swaps[fqn] = "same"
        elif wrong is None:
            swaps[fqn] = "differs"
            problems.append(f"swapping `{fqn}` for its eager original changes the outputs (the unflattened module "
                            f"agrees with eager without the swap: the preserved call boundary is not kept):\n{bad}")
        elif bad is None:
            swaps[fqn] = "fixes"
            problems.append(f"swapping `{fqn}` for its eager original gives eager's outputs: the defect is inside "
                            f"`{fqn}` (export changed what it computes)")
        else:
            swaps[fqn] = "differs"
    data: dict[str, Any] = {"preserved": list(fqns), "swaps": swaps}
    if wrong and not exported_ok and not problems:
        # compare reported the program's defect; it is not inside a preserved submodule (no swap fixes it)
        data["message"] = "the program is wrong (see compare); no preserved submodule alone explains it"
        return data
    if problems:
        raise StageFailure("\n".join(f"- {p}" for p in problems), **data)
    data["message"] = f"unflattened; {plural(len(fqns), 'preserved submodule')} swapped for eager: outputs kept"
    return data


def _enabled(ctx: Context) -> bool:
    return bool(ctx.options.preserve_module_call_signature)


STAGE = Stage("unflatten", run, needs=("eager", "export"), enabled=_enabled)
