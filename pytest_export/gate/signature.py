"""What makes two failures the same (issue #52): a failed stage's signature is its kind (a word such as
``mismatch``, or the exception type torch raised) and, where the failure has one, the detail that identifies it:

- a constraint violation: the violated dims and the guards torch generated, in the declaration's names
  (``UserError: constraints violated (H, W): (H % 2) == 0; (W % 2) == 0``);
- a data-dependent error (or any exception with a frame in the model): the expression and the model's line, by
  its file, function and text, not its number (``GuardOnDataDependentSymNode: Eq(u#, 1) at m.py in forward:
  if x.sum() > 0:``);
- a mismatch: which outputs disagree (``mismatch: output [0]``); an unsupported op: the op; a decomposition that
  leaves ops outside Core ATen: those ops; a refusal the proof decided: the refusing guards.

The detail is normalized so that it is stable across runs, machines, torch's symbol numbering (``s77`` is named
by the declaration, ``u0`` is ``u#``), paths (a file by its name) and line moves that keep the failing line's text.
A baseline entry written before details existed holds the kind alone: it still matches (``matches``), and the run
says which entries to refresh.

Plain Python: no torch, no package imports.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable

SEP = ": "
LIMIT = 400  # characters of a signature at most
_SOURCE = re.compile(r"L\[('[^']+'|\d+)\]((?:\[(?:'[^']*'|\d+)\])*)\.size\(\)\[(\d+)\]")
_SYMBOL = re.compile(r"\b([su])\d+\b")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.\-]*/)+([\w.\-]+\.py)")
_WHERE = re.compile(r"\b(s\d+) = ([\w\[\]'.]+\.shape\[\d+\])")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_DATA_DEPENDENT = re.compile(r"data-dependent expression (.+?)(?: \(unhinted|\.?\s*$)", re.M)
_VIOLATED = re.compile(r"Constraints violated \(([^)]*)\)")


def compose(kind: str, detail: str | None) -> str:
    """``kind: detail`` (or the kind alone), cut to ``LIMIT`` characters."""
    text = f"{kind}{SEP}{detail}" if detail else kind
    return text if len(text) <= LIMIT else text[:LIMIT - 3] + "..."


def kind_of(signature: str) -> str:
    """The kind a signature starts with: what a signature written before details existed holds."""
    return signature.split(SEP, 1)[0]


def matches(listed: str, now: str) -> tuple[bool, bool]:
    """``(same, refresh)``: whether the failure ``now`` is the one the baseline ``listed``, and whether the listed
    signature is the older kind-only form of it (it matches, and ``--export-baseline-update`` makes it precise)."""
    if listed == now:
        return True, False
    if SEP not in listed and SEP in now and kind_of(now) == listed:
        return True, True
    return False, False


def named(text: str, names: dict[str, str]) -> str:
    """``text`` with torch's sources (``L['x'].size()[3]``) and symbols (``s77``) in the declaration's names
    (``names``: ``x.shape[3]`` or a symbol -> the name), other symbols numbered ``s#``/``u#``, paths cut to the
    file's name and addresses dropped."""

    text = _SOURCE.sub(lambda m: names.get(_label(m), _label(m)), text)
    text = _SYMBOL.sub(lambda m: names.get(m.group(0), m.group(1) + "#"), text)
    text = _PATH.sub(lambda m: m.group(1), text)
    return _HEX.sub("0x#", text)


def in_names(text: str, names: dict[str, str]) -> str:
    """A message for people with torch's symbols (``s24``) said in the declaration's names where ``names`` knows
    them, and torch's sources (``L['x'].size()[3]``) as the axes they are (``x.shape[3]``); everything else as it
    is (issue #54)."""
    if not text:
        return text
    text = _SOURCE.sub(_label, text)
    # torch's own "where s27 = x.shape[1]" names a symbol the program never kept (a failed export)
    names = {**{s: names.get(label, label) for s, label in _WHERE.findall(text)}, **names}
    return _SYMBOL.sub(lambda m: names.get(m.group(0), m.group(0)), text)


def _label(m: re.Match) -> str:
    head, rest = m.group(1).strip("'"), m.group(2)
    if head in ("args", "kwargs") and rest:  # L['args'][0][1], L['kwargs']['mask']
        first = re.match(r"\[('[^']*'|\d+)\]", rest)
        head, rest = (first.group(1).strip("'"), rest[first.end():]) if first else (head, rest)
        if head.isdigit():
            head = f"args[{head}]"
    return f"{head}{rest}.shape[{m.group(3)}]"


def _violations(message: str, names: dict[str, str]) -> str | None:
    m = _VIOLATED.search(message)
    if m is None:
        return None
    dims = ", ".join(sorted(named(d.strip(), names) for d in m.group(1).split(",") if d.strip()))
    body = message[m.end():].split("Suggested fixes", 1)[0]
    items = []
    for line in body.splitlines():
        line = line.strip()
        if not line.startswith("- "):
            continue
        line = line[2:]
        g = re.search(r"satisfy the generated guard (.+?)\.?$", line)
        c = re.search(r"You marked (\S+) as dynamic but your code specialized it to be a constant \((-?\d+)\)", line)
        eq = re.search(r"The values of (\S+) = \S+ and (\S+) = \S+ must always be equal", line)
        if g:
            items.append(named(g.group(1), names))
        elif c:
            items.append(f"{named(c.group(1), names)} specialized to {c.group(2)}")
        elif eq:
            items.append(" == ".join(sorted((named(eq.group(1), names), named(eq.group(2), names)))))
        else:
            items.append(re.sub(r"\d+", "#", named(line, names))[:120])
    return f"constraints violated ({dims})" + (SEP + "; ".join(sorted(set(items))) if items else "")


def _outputs(errors: Iterable[Any]) -> str | None:
    paths = sorted({str(e.get("path")) for e in errors if isinstance(e, dict) and e.get("path") is not None})
    if not paths:
        return None
    return "output " + ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")


def _first_line(message: str, names: dict[str, str]) -> str:
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    # "torch.export.save raised: NotImplementedError: text": the kind or the exception already names the type
    line = re.sub(r"^.*?\b[\w.]*(?:Error|Exception|Unsupported|SymNode|Failure)\w*: ", "", line)
    return re.sub(r"\d+", "#", named(line, names))[:160]


def detail_of(stage: str, kind: str, message: str, data: dict[str, Any], names: dict[str, str] | None = None,
              line: str | None = None) -> str | None:
    """The detail that identifies a failure of ``stage`` (see the module's docstring): from the stage's own
    ``detail``, its data (the op, the outputs, the proof's refusals), or torch's message; ``line`` is the model's
    failing line (``file.py in forward: text``) where the failure has one. None where nothing identifies it
    beyond its kind."""
    names = names or {}
    if isinstance(data.get("detail"), str) and data["detail"]:
        return named(data["detail"], names)
    if kind == "unsupported-op" and data.get("unsupported_op"):
        return str(data["unsupported_op"])
    if kind == "non-core" and data.get("non_core"):
        return ", ".join(sorted(str(op) for op in data["non_core"]))
    violated = _violations(message or "", names)
    if violated:
        return violated
    if kind == "mismatch":
        return _outputs(data.get("errors") or [])
    refused = ((data.get("proof") or {}).get("refused") or []) if stage == "guards" else []
    if refused:
        return "refused where " + "; ".join(sorted({named(str(r.get("where")), names) for r in refused}))
    if data.get("exception"):
        dd = _DATA_DEPENDENT.search(message or "")
        parts = [named(dd.group(1), names)] if dd else []
        if line:
            parts.append(f"at {line}")
        return " ".join(parts) or _first_line(message or "", names) or None
    return None


def line_of(filename: str, function: str, text: str | None) -> str | None:
    """The model's failing line as a signature names it: the file's name, the function and the line's text."""
    if not text:
        return None
    return f"{os.path.basename(filename)} in {function}: {text.strip()}"


__all__ = ["compose", "kind_of", "matches", "named", "in_names", "detail_of", "line_of", "SEP"]
