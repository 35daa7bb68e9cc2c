"""The one result model: built by the runner, shown in failures, stored in reports, shipped across xdist.

Everything here is plain data (JSON-able builtins) and imports no torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .util import HarnessError as HarnessError  # the result model's error, defined below the torch side that raises it
from .util import text_table

PASSED, FAILED, SKIPPED, ERROR, XFAILED, XPASSED = "passed", "failed", "skipped", "error", "xfailed", "xpassed"
BAD = (FAILED, ERROR, XPASSED)


class ExportCheckFailure(AssertionError):
    """Raised by the plain-Python API and the fixture when a stage failed."""

    def __init__(self, result: "CaseResult"):
        self.result = result
        super().__init__(result.failure_text())


@dataclasses.dataclass
class StageResult:
    name: str
    status: str
    message: str = ""
    duration: float = 0.0
    data: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # the status, message and duration are the stage's own: data never overwrites them (issue #18)
        out = {"status": self.status, "message": self.message, "duration": round(self.duration, 6)}
        out.update((k, v) for k, v in self.data.items() if k not in out)
        return out

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> "StageResult":
        d = dict(d)
        return cls(name, d.pop("status"), d.pop("message", ""), float(d.pop("duration", 0.0)), d)


@dataclasses.dataclass
class CaseResult:
    nodeid: str
    outcome: str = PASSED
    stages: dict[str, StageResult] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)
    tags: list[str] = dataclasses.field(default_factory=list)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str = ""

    # ---- building -------------------------------------------------------------------------
    def add(self, stage: StageResult) -> StageResult:
        self.stages[stage.name] = stage
        return stage

    def finish(self) -> "CaseResult":
        if self.error:
            self.outcome = ERROR
        elif any(s.status in BAD for s in self.stages.values()):
            self.outcome = FAILED
        elif any(s.status == XFAILED for s in self.stages.values()):
            self.outcome = XFAILED
        else:
            self.outcome = PASSED
        return self

    @property
    def failed(self) -> bool:
        return self.outcome in (FAILED, ERROR)

    def stage_status(self, name: str) -> str | None:
        s = self.stages.get(name)
        return s.status if s else None

    # ---- JSON ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "nodeid": self.nodeid,
            "outcome": self.outcome,
            "stages": {n: s.to_json() for n, s in self.stages.items()},
        }
        if self.tags:
            out["tags"] = list(self.tags)
        if self.warnings:
            out["warnings"] = list(self.warnings)
        if self.error:
            out["error"] = self.error
        out.update(self.info)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CaseResult":
        d = dict(d)
        stages = {n: StageResult.from_json(n, s) for n, s in d.pop("stages", {}).items()}
        return cls(
            nodeid=d.pop("nodeid"),
            outcome=d.pop("outcome", PASSED),
            stages=stages,
            warnings=list(d.pop("warnings", [])),
            tags=list(d.pop("tags", [])),
            error=d.pop("error", ""),
            info=d,
        )

    # ---- text ---------------------------------------------------------------------------
    def table(self) -> str:
        rows = []
        for s in self.stages.values():
            detail = s.message.splitlines()[0] if s.message else ""
            rows.append((s.name, s.status, detail if len(detail) <= 100 else detail[:97] + "..."))
        return text_table(("stage", "status", "detail"), rows)

    def failure_text(self) -> str:
        parts = [f"export check of {self.nodeid}: {self.outcome}"]
        if self.error:
            parts.append(self.error)
        if self.stages:
            parts.append(self.table())
        if self.info.get("shapes") and any(s.status in BAD for s in self.stages.values()):
            parts.append("declared vs achieved dynamic shapes:\n" + shapes_table(self.info["shapes"]))
        for s in self.stages.values():
            if s.status in BAD:
                parts.append(f"--- {s.name}: {s.status} ---\n{s.message}")
        if self.coverage_lines():
            parts.append("coverage of the declared ranges:\n" + "\n".join(f"  {ln}" for ln in self.coverage_lines()))
        if self.warnings:
            parts.append("warnings:\n" + "\n".join(f"  - {w}" for w in self.warnings))
        return "\n\n".join(parts)

    def coverage_lines(self) -> list[str]:
        """One line per declared dim: how far shapes and numerics checked it (issue #23)."""
        from .memory.cost import coverage_line

        cov = self.info.get("ranges") or {}
        lines = [coverage_line(row) for row in cov.get("dims", [])]
        if isinstance(cov.get("guards"), dict) and cov["guards"].get("line"):
            lines.append(str(cov["guards"]["line"]))
        plan = cov.get("plan") if isinstance(cov.get("plan"), dict) else {}
        if plan.get("cut"):
            lines.append(f"numerics cut: {plan['cut']}: sizes planned numeric after it ran by shape only")
        if cov.get("fake_problem"):
            lines.append(f"fake tensors cannot run this model ({cov['fake_problem']}): numerics only")
        if cov.get("program_problem"):
            lines.append(f"the program could not be counted by fake tensors {cov['program_problem']}: its memory "
                         "there is predicted from eager's count alone")
        if isinstance(cov.get("opaque"), dict):
            from .memory.cost import opaque_line

            lines.append(opaque_line(cov["opaque"]))
        for name in RUNTIME_STAGES:  # a deployment runtime run short of the sizes numerics reached (its memory plan)
            st = self.stages.get(name)
            if st is not None and isinstance(st.data.get("coverage"), str):
                lines.append(f"{name}: {st.data['coverage']}")
        return lines

    def raise_for_failure(self) -> "CaseResult":
        if self.failed:
            raise ExportCheckFailure(self)
        return self


RUNTIME_STAGES = ("onnx", "executorch")


def shapes_table(rows: list[dict[str, Any]]) -> str:
    """The audit's rows (the report's ``shapes``), declared vs achieved, one line per declared axis."""
    def rng(r: Any) -> str:
        return "-" if not r else f"[{r[0]}, {'inf' if r[1] is None else r[1]}]"

    body = [(f"{r['input']}" + ("" if r["axis"] is None else f".shape[{r['axis']}]"), str(r["declared"]),
             rng(r["declared_range"]), str(r["achieved"]), rng(r["achieved_range"]),
             r["status"] + (f" (refuses {r['refused_at']})" if r.get("refused_at") is not None else
                            f" (refused where {r['refused_where']})" if r.get("refused_where") else "")
             + (f" (= {', '.join(r['equal_to'])})" if r.get("equal_to") else "")) for r in rows]
    return text_table(("axis", "declared", "declared range", "achieved", "achieved range", "status"), body)


_SCALARS = (bool, int, float, str, bytes)


def to_builtins(value: Any, where: str = "workeroutput") -> Any:
    """``value`` as exact builtin types, for xdist's ``workeroutput`` (the session's torch facts that travel beside
    the results): execnet serializes only those and a subclass (``torch.__version__`` is a ``TorchVersion``, a str
    subclass) kills the worker with ``DumpError``. Subclasses of builtin scalars become their base type, tuples
    and sets lists (sets sorted); anything else raises TypeError naming where it is (a bug here, not in the
    user's tests)."""
    if value is None or type(value) in _SCALARS:
        return value
    for base in _SCALARS:
        if isinstance(value, base):
            return base(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)):
                raise TypeError(f"{where}: key {k!r} ({type(k).__name__}) cannot be sent from an xdist worker")
            out[to_builtins(k, where)] = to_builtins(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [to_builtins(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        return sorted(to_builtins(v, where) for v in value)
    raise TypeError(f"{where}: {type(value).__module__}.{type(value).__qualname__} cannot be sent from an xdist "
                    "worker (execnet sends builtin types only); convert it to str, int, float, list or dict")
