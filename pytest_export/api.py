"""Plain-Python entry point: the same checks as ``pytest --export-check``, without pytest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .options import SessionOptions, merge, validate_keywords
from .results import CaseResult


def check(module: Any, args: Any, kwargs: Any = None, *, name: str = "<check>", raise_on_failure: bool = False,
          workdir: str | Path | None = None, session: SessionOptions | None = None, device: str = "cpu",
          **keywords: Any) -> CaseResult:
    """Export ``module`` on ``args``/``kwargs`` once and run every stage; return the :class:`CaseResult`.

    ``keywords`` are the ``exportable`` marker's keywords (``dynamic_shapes``, ``strict``, ``rtol``, ...);
    ``device`` moves the module and inputs there before export (``"cuda"`` adds the cross-device ``cuda`` stage).
    Misuse raises :class:`pytest_export.UsageError`; a failed stage raises
    :class:`pytest_export.ExportCheckFailure` only with ``raise_on_failure=True``.
    """
    from .case import Case
    from .runner import run_case

    validate_keywords(name, (), keywords)
    case = Case.build(name, module, args, kwargs)
    options = merge(session or SessionOptions(check=True), keywords)
    options.device = device
    result = run_case(case, options, nodeid=name, workdir=Path(workdir) if workdir else None)
    if raise_on_failure:
        result.raise_for_failure()
    return result
