"""Case tags: selection with ``--export-tags`` and markers for ``-m``.

A case's ``tags=[...]`` (a keyword of the ``exportable`` marker) become markers of the same name at collection,
so ``-m "control-flow and not strict"`` works like ``--export-tags control-flow``. Each tag marker is registered
before it is added, so ``--strict-markers`` accepts it. A tag is turned into a marker name by replacing every
character that ``-m`` cannot read with ``_``; a tag whose name is taken by a marker that takes arguments (``skip``,
``xfail``, ``parametrize``, ``exportable``, ...) or is a word of the ``-m`` grammar becomes ``tag_<name>`` so that
it never changes how a test runs.

Plain Python on pytest objects; no torch.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Iterable

import pytest

from ..util import comma_list

TAG_MARKER_DOC = "pytest-export case tag"
"""The description of a marker registered for a tag (``pytest --markers`` lists them after collection)."""

_EXPRESSION_WORDS = frozenset({"and", "or", "not"})
_UNREADABLE = re.compile(r"[^\w.+\-]")  # what -m's identifier grammar cannot read, plus ':' that ini lines split on


def registered_markers(lines: Iterable[str]) -> dict[str, str]:
    """``markers`` ini lines -> {name: signature}, parsed the way pytest parses them."""
    out: dict[str, str] = {}
    for line in lines:
        signature = line.split(":", 1)[0]
        out.setdefault(signature.split("(")[0].strip(), signature.strip())
    return out


def marker_name(tag: str, taken: dict[str, str] | None = None) -> str:
    """The marker name for ``tag``; ``taken`` maps already registered marker names to their signatures.

    A name already registered as a plain label (no arguments) is shared: tagging a case ``slow`` marks it
    ``slow``. A name registered with arguments belongs to a marker with behaviour and is never reused.
    """
    name = _UNREADABLE.sub("_", tag.strip()) or "_"
    signature = (taken or {}).get(name, "")
    if name.startswith("_") or name.lower() in _EXPRESSION_WORDS or "(" in signature:
        name = "tag_" + name.lstrip("_")
    return name


def parse_tags(values: Any) -> list[str]:
    """``--export-tags a,b --export-tags c`` or ini ``export_tags = a, b c`` -> ["a", "b", "c"]."""
    return comma_list(values, split=r"[,\s]+")


def case_tags(item: pytest.Item, marker: str = "exportable") -> list[str]:
    """The tags given to an item's ``exportable`` marker (a string or a list of strings): the one reader of them,
    for selection, the report of a skipped or crashed case, and the markers added for ``-m``."""
    mark = item.get_closest_marker(marker)
    tags = mark.kwargs.get("tags", ()) if mark is not None else ()
    if isinstance(tags, str):
        tags = [tags]
    try:
        return [t for t in tags if isinstance(t, str) and t]
    except TypeError:  # an ill-typed keyword is reported when the case runs, not here
        return []


def apply_tags(config: pytest.Config, items: list[pytest.Item], marker: str, selected: list[str]) -> None:
    """Add a marker per tag to every item; with ``selected`` tags, deselect the items that carry none of them.

    An item is selected when one of the tags is among its case tags, or when it carries a marker of that
    tag's name (a test that calls the ``export_check`` fixture can be tagged with a plain marker).
    """
    taken = registered_markers(config.getini("markers"))
    known: dict[str, str] = {}  # tag -> marker name, over every item seen
    tags_of: dict[int, set[str]] = {}
    for item in items:
        tags = case_tags(item, marker)
        for tag in tags:
            name = known.get(tag)
            if name is None:
                name = known[tag] = marker_name(tag, taken)
                if name not in taken:
                    config.addinivalue_line("markers", f"{name}: {TAG_MARKER_DOC} {tag!r}")
                    taken[name] = name
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
        tags_of[id(item)] = set(tags)
    if not selected:
        return
    wanted = set(selected)
    wanted_markers = {known.get(t) or marker_name(t, taken) for t in selected}
    keep, drop = [], []
    for item in items:
        hit = tags_of[id(item)] & wanted or any(item.get_closest_marker(m) is not None for m in wanted_markers)
        (keep if hit else drop).append(item)
    unknown = [t for t in selected if t not in known and not any(
        i.get_closest_marker(marker_name(t, taken)) is not None for i in items)]
    if unknown and items:
        warnings.warn(pytest.PytestWarning(
            f"--export-tags: no collected test carries the tag(s) {', '.join(map(repr, unknown))}; "
            f"tags here: {', '.join(sorted(known)) or '(none)'}"
        ))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


__all__ = ["apply_tags", "case_tags", "marker_name", "parse_tags", "registered_markers", "TAG_MARKER_DOC"]
