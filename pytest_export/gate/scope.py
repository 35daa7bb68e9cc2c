"""The scope of a run (issue #24): the cases pytest selected, deselected and skipped, the paths collection left out
or could not import, the tests pytest's own ``xfail`` mark covers, the folders the command line covered whole, the
pytest-split group, and whether the run stopped early.

One small model, recorded in the report (``scope``) and read by both gates: the in-run gate at the end of a session
and ``python -m pytest_export gate`` on the merged report of shards. pytest keeps such facts in one place and hands
them on (``config.stash``, the terminal reporter's ``stats``); two gates that each rebuilt them disagreed.

A baseline entry's case is *gone* (its entries stale, pruned by an update) only where the run had every chance to
see it (``Scope.covers``): its folder covered whole, the run not stopped early nor a lone shard, its file
collected, its test neither deselected nor skipped.

``Scope`` is plain data; ``Recorder`` gathers it from the objects pytest's hooks hand the session (it reads their
attributes and imports no pytest), so the report commands read a scope without importing pytest or torch.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Sequence

from ..util import plural

INTERRUPTED = 2  # pytest.ExitCode.INTERRUPTED: Ctrl-C, SIGTERM, collection errors, pytest.exit()
NO_TESTS_COLLECTED = 5  # pytest.ExitCode.NO_TESTS_COLLECTED
FROM_OUTSIDE = "interrupted (Ctrl-C, SIGTERM)"  # ``stopped`` of a run stopped from outside (or by pytest.exit)
DURING_COLLECTION = "during collection"  # in ``stopped`` of a run pytest stopped at a collection error
_CALL = re.compile(r"#\d+$")  # a second export_check call of a test: ``t.py::test#2``


def test_id(nodeid: str) -> str:
    """The test a case id belongs to (``t.py::test#2`` -> ``t.py::test``)."""
    return _CALL.sub("", nodeid)


def _under(prefix: str, nodeid: str) -> bool:
    """Whether a collector or path (``tests/models``, ``t.py``, ``t.py::TestX``) holds the test ``nodeid``."""
    prefix = prefix.rstrip("/")
    return bool(prefix) and (nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "/")))


@dataclasses.dataclass
class Scope:
    """What a run covered. The default is a whole run of the rootdir with nothing left out (a report written
    before scopes were recorded is read so)."""

    folders: list[str] | None = dataclasses.field(default_factory=lambda: [""])  # None: a subset (-k, a file, ...)
    split: dict[str, Any] | None = None  # pytest-split: {"splits": N, "groups": [g, ...]}
    stopped: str | None = None  # why the run ended early: -x, --maxfail, collection errors, Ctrl-C
    selected: list[str] = dataclasses.field(default_factory=list)  # the cases' test ids, as pytest selected them
    deselected: list[str] = dataclasses.field(default_factory=list)  # -k, -m, tags, a conftest, the other shards
    skipped: list[str] = dataclasses.field(default_factory=list)  # tests and collectors (files) pytest skipped
    ignored: list[str] = dataclasses.field(default_factory=list)  # paths collection left out (--ignore, ...)
    errors: list[str] = dataclasses.field(default_factory=list)  # collectors that failed (a file that cannot import)
    xfail: dict[str, dict[str, bool]] = dataclasses.field(default_factory=dict)  # test id -> {"strict"[, "raises"]}

    @classmethod
    def of(cls, value: Scope | Sequence[str] | None) -> Scope:
        """A scope, or one made of the folders that ran whole (None: a subset run)."""
        if isinstance(value, Scope):
            return value
        return cls(folders=None if value is None else list(value))

    @property
    def missing_groups(self) -> list[int]:
        """The pytest-split groups of the run that are not in this scope (a lone shard's, or a merge short of one)."""
        if not self.split:
            return []
        return sorted(set(range(1, self.split["splits"] + 1)) - set(self.split["groups"]))

    @property
    def whole(self) -> list[str] | None:
        """The folders in which a case that did not run is gone, or None: a subset run, a run stopped early, a
        shard without the other groups of its split."""
        if self.stopped or self.missing_groups:
            return None
        return self.folders

    @functools.cached_property
    def _left_tests(self) -> set[str]:
        return set(self.deselected) | set(self.skipped)

    def left_out(self, nodeid: str) -> bool:
        """Whether pytest left this case's test out: deselected, skipped, or in a path it ignored, skipped or could
        not collect."""
        test = test_id(nodeid)
        if test in self._left_tests:
            return True
        return any(_under(p, test) for p in (*self.skipped, *self.ignored, *self.errors))

    def covers(self, nodeid: str) -> bool:
        """Whether the run had every chance to run this case: a case it covers and did not run is gone."""
        whole = self.whole
        if whole is None:
            return False
        path = test_id(nodeid).split("::")[0]
        if not any(d in ("", ".") or path == d or path.startswith(d.rstrip("/") + "/") for d in whole):
            return False
        return not self.left_out(nodeid)

    def incomplete(self) -> str | None:
        """Why a gate on the report of this run must fail whatever its cases say (#32), or None: files pytest could
        not collect (the run fails on them, also under xdist or with --continue-on-collection-errors), or a stop
        before it ran every case it selected (-x, --maxfail). A stop from outside is said by the partial line."""
        if self.errors:
            them = "its cases" if len(self.errors) == 1 else "their cases"
            return (f"{plural(len(self.errors), 'collection error')}: pytest could not collect "
                    f"{', '.join(self.errors)} (an import error?), so {them} did not run, and the run failed on it")
        if self.stopped and self.stopped != FROM_OUTSIDE:
            return f"the run stopped early ({self.stopped}): it did not run every case it selected"
        return None

    def xfail_of(self, nodeid: str) -> dict[str, bool] | None:
        """pytest's ``xfail`` mark in force on this case's test, as the run evaluated it, or None."""
        return self.xfail.get(test_id(nodeid))

    # ---- the report's field ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"folders": self.folders, "split": self.split, "stopped": self.stopped,
                "selected": sorted(self.selected), "deselected": sorted(self.deselected),
                "skipped": sorted(self.skipped), "ignored": sorted(self.ignored), "errors": sorted(self.errors),
                "xfail": {n: dict(m) for n, m in sorted(self.xfail.items())}}

    @classmethod
    def from_json(cls, data: Any) -> Scope:
        """The report's ``scope``; ValueError naming the field where it is malformed (a hand-edited report)."""
        if not isinstance(data, dict):
            raise ValueError("\"scope\" must be an object")

        def strings(key: str, default: list[str] | None = None) -> list[str]:
            value = data.get(key, default or [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"scope.{key} must be a list of strings" + (" or null" if default else ""))
            return list(value)

        folders = None if data.get("folders", "") is None else strings("folders", [""])
        split = data.get("split")
        if split is not None and not (isinstance(split, dict) and isinstance(split.get("splits"), int)
                                      and isinstance(split.get("groups"), list)
                                      and all(isinstance(g, int) for g in split["groups"])):
            raise ValueError('scope.split must be {"splits": int, "groups": [int, ...]} or null')
        stopped = data.get("stopped")
        if stopped is not None and not isinstance(stopped, str):
            raise ValueError("scope.stopped must be a string or null")
        xfail = data.get("xfail", {})
        if not isinstance(xfail, dict) or not all(isinstance(m, dict) for m in xfail.values()):
            raise ValueError('scope.xfail must map a test id to {"strict": bool}')
        return cls(folders, split, stopped, strings("selected"), strings("deselected"), strings("skipped"),
                   strings("ignored"), strings("errors"), {n: dict(m) for n, m in xfail.items()})

    @classmethod
    def merged(cls, scopes: Sequence[Scope | None]) -> Scope:
        """The scope of the reports of shards merged into one (None: a report that recorded none, such as the case
        lines of a killed run: what it covered is unknown). The groups of a split add up; a test one shard
        selected is not deselected by the others (pytest-split deselects every other group's tests)."""
        known = [s for s in scopes if s is not None]
        out = cls(folders=None)
        if len(known) == len(scopes) and all(s.folders is not None for s in known):
            out.folders = sorted({f for s in known for f in s.folders or ()})
        splits = {s.split["splits"] for s in known if s.split}
        if splits:
            groups = {g for s in known if s.split for g in s.split["groups"]}
            out.split = {"splits": max(splits), "groups": sorted(groups)}
            if len(splits) > 1 or not all(s.split for s in known):
                out.folders = None  # shards of different splits, or a shard with a whole run: no one run's scope
        out.stopped = "; ".join(dict.fromkeys(s.stopped for s in known if s.stopped)) or None
        selected = {n for s in known for n in s.selected}
        out.selected = sorted(selected)
        out.deselected = sorted({n for s in known for n in s.deselected} - selected)
        for name in ("skipped", "ignored", "errors"):
            setattr(out, name, sorted({n for s in known for n in getattr(s, name)}))
        out.xfail = {n: m for s in known for n, m in s.xfail.items()}
        return out


class Recorder:
    """Gathers a run's scope from what pytest's hooks hand the session, on whichever process sees it: collection
    (selection, deselection, ignored paths) on the process that collects, an xdist worker's shipped to the
    controller (``worker_data``, ``merge``); tests' and collectors' reports on the controller."""

    def __init__(self, is_case: Callable[[Any], bool]):
        self.is_case = is_case  # an item that is an export case: the marker, or the export_check fixture
        self.selected: set[str] = set()
        self.deselected: set[str] = set()
        self.skipped: set[str] = set()
        self.skipped_whole: set[str] = set()  # collectors (a file, a class) skipped whole
        self.ignored: set[str] = set()
        self.errors: set[str] = set()
        self.xfail: dict[str, dict[str, bool]] = {}

    def collected(self, items: Iterable[Any]) -> None:
        self.selected.update(i.nodeid for i in items if self.is_case(i))

    def deselect(self, items: Iterable[Any]) -> None:
        self.deselected.update(i.nodeid for i in items if self.is_case(i))

    def ignore(self, path: Path, root: Path) -> None:
        if path.name == "__pycache__" or path.name.startswith("."):
            return  # never test code: pytest's own leavings and hidden folders (.git, .venv)
        try:
            self.ignored.add(path.resolve().relative_to(root.resolve()).as_posix())
        except ValueError:
            pass  # outside the rootdir: no test id lies there

    def collect_report(self, report: Any) -> None:
        """A collector that failed (a file that cannot be imported) or was skipped (a module-level importorskip)."""
        if report.failed:
            self.errors.add(report.nodeid)
        elif report.skipped:
            self.skipped_whole.add(report.nodeid)

    def test_report(self, report: Any) -> None:
        """A test skipped at setup (skipif, an xfail mark with run=False) or in its call (pytest.skip,
        importorskip), and the xfail mark ``pytest_runtest_makereport`` found in force on it."""
        if report.skipped and (report.when == "setup" or not hasattr(report, "wasxfail")):
            self.skipped.add(report.nodeid)
        mark = getattr(report, "export_xfail", None)
        if mark:
            self.xfail[report.nodeid] = dict(mark)

    def worker_data(self) -> dict[str, Any]:
        """What an xdist worker saw of collection (its controller collects nothing), as JSON-able builtins; the
        tests' reports reach the controller by themselves."""
        return {k: sorted(getattr(self, k)) for k in ("selected", "deselected", "ignored", "errors", "skipped_whole")}

    def merge(self, data: dict[str, Any] | None) -> None:
        for key, values in (data or {}).items():
            getattr(self, key).update(values)

    def scope(self, folders: list[str] | None, split: dict[str, Any] | None, stopped: str | None) -> Scope:
        cases = self.selected | self.deselected
        return Scope(folders, split, stopped, sorted(self.selected), sorted(self.deselected - self.selected),
                     sorted(self.skipped_whole | (self.skipped & cases)), sorted(self.ignored),
                     sorted(self.errors), {n: m for n, m in self.xfail.items() if n in cases})


# ---- what the command line and the session's end say (pytest's objects, read by their attributes) -----------
def folders_of(config: Any) -> list[str] | None:
    """Rootdir-relative folders the command line gave whole, or None for a subset run (``-k``, ``-m``,
    ``--deselect``, a file, a test id, ``--export-tags``, ``--lf``, ``--sw``, ``-x``/``--maxfail``,
    ``--collect-only``, which runs no case): only inside them can a case that did not run be gone. A pytest-split
    shard is told by ``split_of``, a stop by ``stopped_of``."""
    opt = config.option
    if (getattr(opt, "keyword", "") or getattr(opt, "markexpr", "") or getattr(opt, "deselect", None)
            or getattr(opt, "collectonly", False) or getattr(opt, "lf", False) or getattr(opt, "stepwise", False)
            or getattr(opt, "maxfail", 0) or config.getoption("export_tags") or config.getini("export_tags")):
        return None
    root = Path(config.rootpath).resolve()
    folders = []
    for arg in config.args:
        if "::" in arg:
            return None
        path = Path(arg) if Path(arg).is_absolute() else Path(config.invocation_params.dir, arg)
        if not path.is_dir():
            return None
        try:
            rel = path.resolve().relative_to(root)
        except ValueError:
            return None
        folders.append("" if str(rel) == "." else rel.as_posix())
    return folders


def split_of(config: Any) -> dict[str, Any] | None:
    """The pytest-split group this run is, or None."""
    splits, group = getattr(config.option, "splits", None), getattr(config.option, "group", None)
    return {"splits": splits, "groups": [group]} if splits and group else None


def stopped_of(session: Any, errors: Collection[str]) -> str | None:
    """Why the session ended before running every selected test, or None. Collection errors stop a run unless
    ``--continue-on-collection-errors`` says otherwise, also under xdist, whose controller goes on running the
    tests (a run is judged the same with and without ``-n``)."""
    why = session.shouldfail or session.shouldstop
    if why:
        return why if isinstance(why, str) else "the run was stopped early"
    if errors and not session.config.option.continue_on_collection_errors:
        return f"{plural(len(errors), 'error')} {DURING_COLLECTION}: {', '.join(sorted(errors))}"
    if int(session.exitstatus) == INTERRUPTED:
        return FROM_OUTSIDE
    return None


def interrupted(scope: Scope, exitstatus: int) -> bool:
    """Whether the run was stopped from outside (Ctrl-C, SIGTERM, pytest.exit): pytest's exit status 2, which it
    also gives a run it stopped itself at a collection error (#32: that one is no interruption)."""
    return int(exitstatus) == INTERRUPTED and not (scope.errors and DURING_COLLECTION in (scope.stopped or ""))


def empty_shard(scope: Scope, exitstatus: int) -> str | None:
    """The line for a pytest-split shard that received no cases while the other groups have them (pytest-split's
    ``duration_based_chunks`` leaves a group empty when durations are skewed, any algorithm when there are fewer
    tests than groups): it exits 0, not pytest's 5. None for any other run, a plain one that collected nothing
    included."""
    if int(exitstatus) != NO_TESTS_COLLECTED or not scope.split or scope.selected or not scope.deselected:
        return None
    return (f"pytest-export: group {scope.split['groups'][0]} of {scope.split['splits']} (pytest-split) received no "
            "tests: the other groups have them all; exit status 0, not pytest's 5 (no tests collected)")


def xfail_mark(item: Any) -> dict[str, bool] | None:
    """pytest's ``xfail`` mark in force on ``item``, as its skipping plugin evaluated it (conditions, ``strict``,
    the ``strict_xfail`` ini): read from the stash where pytest keeps that evaluation, the one place it is whole."""
    if item.config.option.runxfail:
        return None
    try:
        from _pytest.skipping import xfailed_key
    except ImportError:  # a pytest that moved it: the marks go unrecorded, and the gates read no mark
        return None
    xfailed = item.stash.get(xfailed_key, None)
    if xfailed is None or not xfailed.run:
        return None
    return {"strict": bool(xfailed.strict), **({"raises": True} if xfailed.raises is not None else {})}


__all__ = ["Scope", "Recorder", "folders_of", "split_of", "stopped_of", "interrupted", "empty_shard", "xfail_mark",
           "test_id", "FROM_OUTSIDE"]
