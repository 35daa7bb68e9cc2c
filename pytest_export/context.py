"""What a stage gets and gives: the case context (the one exported program, reused by every stage), the stage
protocol, and the two ways a stage ends other than passing (``StageFailure``: the model or export is wrong;
``StageSkip``: it does not apply). A ``HarnessError`` (``results``) or any other exception is the harness's
own: the runner makes it an ``error``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree  # private module, but torch's only pytree API (export itself uses it)

from .audit import KEPT, REFUSED_IN_RANGE, audit
from .declare.case import Case
from .declare.options import CaseOptions, UsageError
from .declare.shapes import parse
from .gate.signature import detail_of, in_names, line_of
from .memory.calibration import Calibration
from .results import FAILED, XFAILED, CaseResult, HarnessError, StageResult
from .torchside.compare import Mismatch, near_noise
from .torchside.frames import model_frames
from .torchside.modstate import StateKeeper
from .torchside.observe import Observation, compare_observations, float64_observe, observe
from .torchside.torchlog import quiet_fake_logs
from .util import describe_exception


class StageSkip(Exception):
    """A stage does not apply to this case; the message says why."""


class StageFailure(Exception):
    """A stage found a defect in the model or its export: message for people, data for the report.

    ``kind`` names the defect in a word (``mismatch``, ``refused-in-range``, ...): with the stage it is the
    failure's signature, which the baseline compares (a different failure in a known-failing stage is new).
    """

    def __init__(self, message: str, /, kind: str | None = None, **data: Any):
        super().__init__(message)
        self.kind = kind
        self.data = data


@contextlib.contextmanager
def failing_as(label: str, kind: str | None = None, **data: Any):
    """The torch call a stage checks: whatever it raises is the stage's finding (``failed``), not a crash of
    the harness (``error``; issue #18)."""
    try:
        yield
    except (StageFailure, StageSkip, HarnessError):
        raise
    except Exception as exc:  # noqa: BLE001 - what the checked call raises is the finding
        raise StageFailure(f"{label} raised: {describe_exception(exc)}", kind=kind, exception=type(exc).__name__,
                           **data) from exc


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage: its public ``name``, the stages whose product it ``needs``, when it is ``enabled`` for a case,
    and ``run(ctx)``, which returns the stage's report data (``"message"`` for people) or raises
    ``StageFailure`` / ``StageSkip``. Every module of ``stages/`` defines one as ``STAGE``."""

    name: str
    run: Callable[["Context"], dict[str, Any] | None]
    needs: tuple[str, ...] = ()
    enabled: Callable[["Context"], bool] = lambda ctx: True


class Context:
    """Everything a stage may use; the exported program lives here and is reused by every later stage."""

    def __init__(self, case: Case, options: CaseOptions, nodeid: str, workdir: Path, session: Any = None,
                 source: Case | None = None):
        self.case = case
        self.source = source or case  # the case as given (on cpu); ``case`` is its copy on options.device
        self.options = options
        self.nodeid = nodeid
        self.workdir = workdir
        self.session = session
        self.result = CaseResult(nodeid, tags=list(options.tags))
        self.ep = None
        self.loaded: dict[str, Any] = {}
        self.decomposed = None
        self._reference: Observation | None = None
        self._float64: Observation | str | None = None  # eager in float64 on the examples, where noise is measured
        self._modules: dict[int, torch.nn.Module] = {}
        self.declaration = None  # declare.shapes.Declaration, parsed before export
        self.audit_problem: str | None = None
        self.declaration_error: str | None = None
        self._audit = None
        # the refusing guards (``proof.solver.Decided``) that `guards` proved and fails on: `fuzz` leaves their
        # sizes to it, so both stages' verdicts are the same every run (issue #51)
        self.refused_by_proof: list[Any] = []
        # stages whose product later stages can use although the stage itself did not pass (eager ran, but its
        # outputs could not be compared: export must still be tried)
        self.keeper = StateKeeper()  # the modules' state tensors as they were, copied once per case
        self.usable: set[str] = set()
        self.python_changes: list[dict[str, Any]] = []  # what eager forward changed in the module's Python state
        self.torch_symbols: dict[str, str] = {}  # a failed export's symbols -> their axes (``symbol_labels``)
        self.eager_rejects: list[str] = []  # sizes 0/1 inside the promise where eager itself raises (no failure)
        self.calibration = Calibration(case, options, self.eager_on, lambda: self.ep,
                                       lambda a, k, within: self.program_on(self.ep, a, k, within=within))  # what its probes cost (#23)

    # dynamic shapes ------------------------------------------------------------------------
    def audit(self):
        """Declared vs achieved for the exported program (``audit.Audit``), computed once; None if unavailable
        (``audit_problem`` says why)."""
        if self._audit is None and self.ep is not None and self.declaration is not None:
            try:
                self._audit = audit(self.declaration, self.ep, allow_static=self.options.allow_static,
                                    max_size=self.options.max_size)
            except Exception as exc:  # noqa: BLE001 - guards and fuzz end as `error`; export stands
                self.audit_problem = f"could not map dynamic_shapes onto the exported program: {describe_exception(exc)}"
                self.declaration = None
        return self._audit

    def require_audit(self):
        """The audit, for a stage that cannot decide without it: a harness limit is an ``error`` (issue #18)."""
        au = self.audit()
        if au is None:
            raise HarnessError(f"cannot check the declared ranges: {self.audit_problem or 'no dynamic-shapes model'}")
        if au.errors:
            raise HarnessError("cannot check the declared ranges: " + "; ".join(au.errors))
        return au

    def mark_relation(self, symbols: list[str], where: str) -> None:
        """In-range sizes the program refused only together (``h16*w16 == 196``): the rows of those dims say
        where, and no row says one of them is refused at a size it passes with the others elsewhere (#33)."""
        au = self._audit
        if au is None:
            return
        for row, sym in zip(au.rows, au.row_symbols):
            if sym in symbols:
                row.setdefault("refused_where", where)
                if row.get("status") == KEPT:
                    row["status"] = REFUSED_IN_RANGE

    def mark_refused(self, symbol: str, values: dict[str, int]) -> None:
        """An in-range size the program refused: the audit table must not still say ``kept`` for its axes."""
        au = self._audit
        if au is None:
            return
        sizes = au.model.sizes(values)
        for row, sym, (flat, dim) in zip(au.rows, au.row_symbols, au.row_axes):
            if sym != symbol:
                continue
            size = sizes.get(flat, {}).get(dim)
            if size is None:
                continue
            if size < row.get("refused_at", size + 1):
                row["refused_at"] = size
            if row.get("status") == KEPT:  # narrowed / specialized already say it is not kept
                row["status"] = REFUSED_IN_RANGE

    def export_dynamic_shapes(self) -> Any:
        """``dynamic_shapes`` as handed to ``torch.export.export`` (every export of this case uses the same)."""
        dynamic_shapes = self.options.dynamic_shapes
        if isinstance(dynamic_shapes, torch.export.ShapesCollection):
            # keyed by the identity of the example tensors: resolve it on the case's own inputs, not the clones
            dynamic_shapes = dynamic_shapes.dynamic_shapes(self.source.module, self.source.args, self.source.kwargs)
        return dynamic_shapes

    # programs ------------------------------------------------------------------------------
    def module_of(self, ep) -> torch.nn.Module:
        """``ep.module()`` built once per program (it builds a new module on every call)."""
        mod = self._modules.get(id(ep))
        if mod is None:
            mod = self._modules[id(ep)] = ep.module()
        return mod

    def reference(self) -> Observation:
        if self._reference is None:
            self._reference = observe(self.case.module, self.case.module, self.case.args, self.case.kwargs,
                                      self.keeper, grad=self.options.grad)
        return self._reference

    def eager_on(self, args: tuple, kwargs: dict, within: Any = None) -> Observation:
        return observe(self.case.module, self.case.module, args, kwargs, self.keeper, within=within,
                       grad=self.options.grad)

    def program_on(self, ep, args: tuple, kwargs: dict, fake: bool = False, within: Any = None) -> Observation:
        """``ep`` run on these inputs: real, fake (``fake``), or inside ``within`` (a counted fake run)."""
        mod = self.module_of(ep)
        if not fake and within is None:
            return observe(mod, mod, args, kwargs, self.keeper, grad=self.options.grad)
        with quiet_fake_logs():
            return observe(mod, mod, args, kwargs, self.keeper, within=within or self.calibration.fake_mode(),
                           grad=self.options.grad)

    def check_program(self, ep, label: str) -> dict[str, float]:
        """The program against eager on the example inputs.

        Where ``compare`` already found the exported program wrong, later programs are compared with the
        exported one instead, so each stage reports its own defect and not the same mismatch again.
        """
        try:
            got = self.program_on(ep, self.case.args, self.case.kwargs)
        except HarnessError:
            raise
        except Exception as exc:  # noqa: BLE001 - what the program does with the example is the finding
            raise StageFailure(f"the {label} program raised on the example inputs: {describe_exception(exc)}",
                               kind="raised", exception=type(exc).__name__)
        against, expected = "eager", None
        # only a failed compare moves the reference; a compare skipped on request still leaves eager the reference
        if ep is not self.ep and self.result.stage_status("compare") in (FAILED, XFAILED):
            against = "the exported program (compare failed, so eager is not the reference here)"
            expected = self.program_on(self.ep, self.case.args, self.case.kwargs)
        try:
            return compare_observations(got, expected or self.reference(), self.options)
        except Mismatch as exc:
            failure = exc
        if expected is None and near_noise(failure.errors):  # measure eager's own noise (#54)
            try:
                return compare_observations(got, self.reference(), self.options, reference=self.float64_reference())
            except Mismatch as exc:
                failure = exc
        raise StageFailure(f"the {label} program disagrees with {against}:\n{failure}", kind="mismatch",
                           errors=failure.errors, **failure.worst())

    def float64_reference(self) -> Observation | str:
        """Eager in float64 on the example inputs (once per case), or why it cannot run."""
        if self._float64 is None:
            try:
                self._float64 = float64_observe(self.case.module, self.case.module, self.case.args, self.case.kwargs)
            except HarnessError:
                raise
            except Exception as exc:  # noqa: BLE001 - a model that cannot run in float64 has no such reference
                self._float64 = f"float64 eager raised {describe_exception(exc, 200)}"
        return self._float64

    def symbol_names(self) -> dict[str, str]:
        """Each declared axis (``x.shape[3]``) and each of torch's symbols (``s24``) the program kept -> the
        declaration's name for it: a named ``Dim`` by its name, any other axis by its label (issue #54)."""
        names: dict[str, str] = {}
        decl = self.declaration
        for ax in decl.axes if decl is not None else ():
            root = decl.roots.get(ax.root)
            if ax.dim is not None and ax.a == 1 and ax.b == 0:
                names[ax.label] = root.name if root is not None and root.kind == "dim" else ax.label
        for row in self.result.info.get("shapes") or []:
            achieved = str(row.get("achieved"))
            if row.get("axis") is not None and achieved.startswith("s") and achieved[1:].isdigit():
                label = f"{row['input']}.shape[{row['axis']}]"
                names.setdefault(achieved, names.get(label, label))
        for sym, label in self.torch_symbols.items():
            names.setdefault(sym, names.get(label, label))
        return names

    def in_names(self, out: StageResult) -> StageResult:
        """A stage's message said in the declaration's names: torch's symbols never reach the user (issue #54)."""
        out.message = in_names(out.message, self.symbol_names())
        return out

    def finish(self) -> CaseResult:
        """The case's result, its warnings said in the declaration's names."""
        names = self.symbol_names()
        self.result.warnings = [in_names(w, names) for w in self.result.warnings]
        return self.result.finish()

    def failure_detail(self, stage: str, exc: StageFailure, data: dict[str, Any]) -> str | None:
        """What identifies a stage's failure within its kind (``gate.signature``), in the declaration's names: a
        named ``Dim`` by its name, any other axis by its label, torch's symbols by the axes they stand for. None
        where nothing does, or where it cannot be read (the kind alone still matches)."""
        try:
            cause = exc.__cause__ or exc.__context__
            frames = model_frames(cause) if cause is not None else []
            line = line_of(frames[-1].filename, frames[-1].name, frames[-1].line) if frames else None
            return detail_of(stage, data["signature"], str(exc), data, self.symbol_names(), line)
        except Exception as exc:  # noqa: BLE001 - a detail is extra: it never turns a finding into a crash
            # said, not hidden: the baseline then compares this failure by its kind alone
            self.result.warnings.append(f"{stage}: the failure's detail could not be read ({describe_exception(exc, 200)}); "
                                        "its baseline signature is its kind alone (please report it)")
            return None

    def read_declaration(self) -> None:
        """The dynamic_shapes model, before export. A declaration that does not fit the case (an axis past the
        rank, a name defined twice, an example outside its own range, a key that is no argument) fails the
        ``export`` stage with a message that points at the key, without calling torch."""
        try:
            self.declaration = parse(self.nodeid, self.options.dynamic_shapes, self.source.module, self.source.args,
                                    self.source.kwargs)
            if self.case is not self.source and self.declaration.additional:
                self.declaration.additional = [_to(self.options.device, a) for a in self.declaration.additional]
        except UsageError as exc:
            self.declaration_error = str(exc)
            self.audit_problem = "dynamic_shapes does not fit the case"
        except Exception as exc:  # noqa: BLE001 - export reports the real problem; guards and fuzz end as `error`
            self.audit_problem = f"could not read dynamic_shapes: {describe_exception(exc)}"


def _to(device: str, tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


__all__ = ["Context", "Stage", "StageFailure", "StageSkip", "failing_as"]
