"""The marker's ``reproduce=`` blob: read as a failed ``fuzz`` stage printed it (the blob alone, or the whole
``@reproduce_failure(...)`` line), and checked before the case runs (issue #44). Imports nothing of the package;
Hypothesis only when a blob is checked.
"""

from __future__ import annotations

import re
from typing import Any

BLOB = re.compile(r"reproduce_failure\(\s*'[^']*'\s*,\s*b'([^']+)'\s*\)")


def parse_blob(text: str) -> bytes:
    """The marker's ``reproduce=``: the blob alone, or the whole ``@reproduce_failure(...)`` line."""
    m = BLOB.search(text)
    return (m.group(1) if m else text.strip().strip("b'\"")).encode()


def is_blob(v: Any) -> str | None:
    """A ``reproduce=`` blob that Hypothesis can decode (issue #44: a malformed one crashed the harness)."""
    if v is None:
        return None
    if not isinstance(v, str):
        return "must be a string or None"
    from hypothesis.core import decode_failure

    try:
        decode_failure(parse_blob(v))
    except Exception as exc:  # noqa: BLE001 - Hypothesis says why it cannot decode it
        return (f"is not a blob a failed `fuzz` stage printed ({type(exc).__name__}: {exc}); copy it whole from "
                "the failure's `replay:` line (`reproduce=\"...\"`), or remove it")
    return None


__all__ = ["BLOB", "parse_blob", "is_blob"]
