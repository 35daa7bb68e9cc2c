"""Plain-Python entry point: the same checks as ``pytest --export-check``, without pytest.

``build`` and ``run`` are the path every case takes from its module and inputs to its result: ``check`` here,
the ``export_check`` fixture and (``run`` only: its case comes from the test's return value) the marker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .declare.options import CaseOptions, SessionOptions, merge, validate_keywords
from .results import CaseResult

if TYPE_CHECKING:
    from .declare.case import Case


def build(name: str, module: Any, args: Any, kwargs: Any, keywords: dict[str, Any]) -> Case:
    """A case from a module and its inputs, the marker's ``keywords`` validated (:class:`UsageError` if not)."""
    from .declare.case import Case

    validate_keywords(name, (), keywords)
    return Case.build(name, module, args, kwargs)


def run(case: Case, keywords: dict[str, Any], *, nodeid: str, options: SessionOptions | None = None,
        workdir: str | Path | None = None, device: str = "cpu", session: Any = None,
        prepare: Callable[[CaseOptions], None] | None = None,
        progress: Callable[[str, float], None] | None = None) -> CaseResult:
    """Run every stage of ``case``: the session's ``options`` (default: those of ``--export-check`` alone) under
    the marker's ``keywords``, on ``device``; ``session`` gives the stages run-wide caches (the pytest session),
    ``prepare`` settles what only it knows (a known failure goes undiagnosed) before the case runs, ``progress``
    hears of each stage as it starts (``runner.run_case``)."""
    from .repro.write import write_repro
    from .runner import run_case

    case_options = merge(options or SessionOptions(check=True), keywords)
    case_options.device = device
    if prepare is not None:
        prepare(case_options)
    kept: list[Any] = []
    result = run_case(case, case_options, nodeid=nodeid, workdir=Path(workdir) if workdir else None, session=session,
                      keep=kept, progress=progress)
    # --export-repro DIR: a script per failing case, its probe's inputs built on the case's own program
    return write_repro((options or SessionOptions()).repro, case, case_options, result, kept[0] if kept else None)


def check(module: Any, args: Any, kwargs: Any = None, *, name: str = "<check>", raise_on_failure: bool = False,
          workdir: str | Path | None = None, session: SessionOptions | None = None, device: str = "cpu",
          **keywords: Any) -> CaseResult:
    """Export ``module`` on ``args``/``kwargs`` once and run every stage; return the :class:`CaseResult`.

    ``keywords`` are the ``exportable`` marker's keywords (``dynamic_shapes``, ``strict``, ``rtol``, ...);
    ``device`` moves the module and inputs there before export (``"cuda"`` adds the cross-device ``cuda`` stage).
    Misuse raises :class:`pytest_export.UsageError`; a failed stage raises
    :class:`pytest_export.ExportCheckFailure` only with ``raise_on_failure=True``.
    """
    result = run(build(name, module, args, kwargs, keywords), keywords, nodeid=name, options=session,
                 workdir=workdir, device=device)
    if raise_on_failure:
        result.raise_for_failure()
    return result


__all__ = ["check", "build", "run"]
