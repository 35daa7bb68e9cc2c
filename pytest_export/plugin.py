"""pytest hooks of pytest-export, and nothing else: each hook hands off to the module that does the work.

``declare.settings`` (options), ``session`` (state, xdist, the run's books and, through ``report.run``, its end),
``items`` (a case's test: case -> result -> gate), ``tags`` (selection). This module must not import torch: a
pytest run that does not use the plugin must not pay for it; options, results, the runner and torch are imported
where a case needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from . import items as items_mod  # the collection hook's argument is called `items`
from . import session as session_mod
from .declare import settings
from .items import MARKER, VARIANT, ExportBaselineWarning


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``export`` option group and the ini twins, from the one table in ``settings``."""
    settings.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker (always, for --strict-markers) and this run's session."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(dynamic_shapes=None, strict=False, rtol=None, atol=None, core_aten=None, tags=(), xfail=None, ...): "
        "the test returns (module, args[, kwargs]); with --export-check it is exported and checked "
        "(see docs/options.md of pytest-export for every keyword)",
    )
    es = session_mod.ExportSession(config, is_case=items_mod.is_case)
    config.stash[session_mod.SESSION_KEY] = es
    config.pluginmanager.register(es, "pytest-export-session")
    if not es.check and not hasattr(config, "workerinput"):
        given = settings.given_without_check(config)
        if given:
            config.issue_config_time_warning(pytest.PytestConfigWarning(
                f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect without --export-check: "
                "no case is exported, so nothing is gated, reported or varied; add --export-check"), stacklevel=2)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Unregister the session (an in-process run, such as pytester's, leaves nothing behind)."""
    es = config.stash.get(session_mod.SESSION_KEY, None)
    if es is not None and config.pluginmanager.is_registered(es):
        config.pluginmanager.unregister(es)


@pytest.hookimpl(tryfirst=True)  # tag markers must exist before -m deselects
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tag markers and --export-tags selection; each marked test made to check the case it returns."""
    from .declare.tags import apply_tags

    apply_tags(config, items, MARKER, settings.value(config, "export_tags"))
    for item in items:
        if isinstance(item, pytest.Function) and item.get_closest_marker(MARKER) is not None:
            for name in ("tmp_path", "tmp_path_factory"):  # the case's workdir and the run's caches
                if name not in item.fixturenames:
                    item.fixturenames.append(name)
            item.obj = items_mod.wrap(item, item.obj)


@pytest.hookimpl(trylast=True)  # after the test's own parametrize: its ids come first
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One item per tracing mode and device (--export-modes, --export-devices)."""
    if metafunc.definition.get_closest_marker(MARKER) is None:
        return
    variants = session_mod.session_of(metafunc.config).variants()
    if variants:
        metafunc.fixturenames.append(VARIANT)
        metafunc.parametrize(VARIANT, variants, ids=[v.id for v in variants], indirect=True)


@pytest.fixture
def _pytest_export_variant(request: pytest.FixtureRequest) -> Any:
    """The (mode, device) of this item of a marked case."""
    return request.param


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Each case's stage statuses as user properties (JUnit XML), its results and its test's xfail mark on the
    report (xdist)."""
    results = item.stash.get(items_mod.RESULTS_KEY, None) if call.when == "call" else None
    if results:
        # on the item, like record_property: the call and teardown reports copy them (JUnit XML reads teardown's)
        for i, r in enumerate(results):
            prefix = "export" if i == 0 else f"export#{i + 1}"
            for name, stage in r.stages.items():
                item.user_properties.append((f"{prefix}.{name}", stage.status))
            item.user_properties.append((f"{prefix}.outcome", r.outcome))
    report = yield
    check = session_mod.session_of(item.config).check
    if call.when == "setup" and check and item.get_closest_marker(MARKER) is not None:
        from .declare.tags import case_tags

        # sent ahead of the call, so the controller can report the case if its worker dies running it
        report.export_case = {"tags": case_tags(item, MARKER)}
    if call.when in ("setup", "call") and check and items_mod.is_case(item):
        from .gate.scope import xfail_mark

        mark = xfail_mark(item)  # pytest's own xfail mark, as it evaluated it: for both gates (#24)
        if mark:
            report.export_xfail = mark
    if results:
        report.export_results = [r.to_json() for r in results]
    return report


@pytest.fixture
def export_check(request: pytest.FixtureRequest, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """Check a module explicitly: ``export_check(module, args, kwargs=None, raise_on_failure=True, device="cpu",
    **keywords)``.

    Takes the marker's keywords, runs every stage, returns the result, and gates it as the marker does: a failed
    stage fails the test, a case whose failures were all expected (``xfail=``) or known to the baseline xfails
    it, a stale baseline entry fails it or warns. ``raise_on_failure=False`` returns the result and lets the
    test decide: the case counts as its test ends (an ``error`` still fails the test: there is no result to decide
    on).
    """
    return items_mod.fixture_check(request, tmp_path, tmp_path_factory)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """One line saying --export-check is on, with its examples and report path."""
    es = session_mod.session_of(config)
    if es.check:
        return [f"pytest-export: --export-check on (examples={es.options.examples}, report={es.options.report})"]
    return None


__all__ = ["export_check", "MARKER", "ExportBaselineWarning"]
