"""Small helpers every layer shares: bounds that may be infinite, text tables, comma-separated option values,
environment variables set for a block, torch-version conditions (of ``xfail`` entries), and ``HarnessError`` (the
harness could not decide). Plain Python; imports nothing from this package and no torch.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence
from unittest import mock


class HarnessError(Exception):
    """The harness could not decide (a value it cannot compare, a declaration it cannot map): the stage ends as
    ``error``, never ``failed``, and the message (for people) is shown as it is. Here, below every layer, so that
    the torch side (``compare``'s ``CannotCompare``) raises it without importing the result model; ``results``
    names it too."""


HUGE = 2**62  # torch's "unbounded" stand-ins (sys.maxsize, int_oo) all lie above this


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 example``, ``3 examples`` (``many`` where the plural is not ``word + "s"``)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def finite_int(value: Any) -> int | None:
    """An int bound, or None where it is infinite or no number (torch's ``int_oo``, ``sympy.oo``, ``None``)."""
    try:
        i = int(value)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None  # sympy's int_oo raises AttributeError from int()
    return i if abs(i) < HUGE else None


def text_table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = (),
               rule_before: Iterable[int] = ()) -> str:
    """A plain-text table: a header, a ``-+-`` rule under it, one line per row; columns in ``right`` are
    right-aligned; a rule is drawn before each row index in ``rule_before`` (a totals row)."""
    body = [[str(c) for c in r] for r in rows]
    head = [str(h) for h in header]
    right, rules = set(right), set(rule_before)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    rule = "-+-".join("-" * w for w in widths)

    def line(cells: list[str]) -> str:
        return " | ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(head), rule]
    for i, r in enumerate(body):
        if i in rules:
            out.append(rule)
        out.append(line(r))
    return "\n".join(out)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = ()) -> str:
    """The same table in GitHub Markdown (columns in ``right`` right-aligned)."""
    right = set(right)
    lines = ["| " + " | ".join(str(h) for h in header) + " |",
             "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def comma_list(value: Any, *, split: str = r",") -> list[str]:
    """``--opt a,b --opt c`` (a list of chunks, one string, or None) -> ["a", "b", "c"], order kept, no repeats."""
    if value is None:
        return []
    chunks = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for chunk in chunks:
        for part in re.split(split, str(chunk)):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out


def environment(**values: str | None):
    """Set (or, with None, unset) environment variables for a ``with`` block; everything is restored after."""
    patch = mock.patch.dict(os.environ, {k: v for k, v in values.items() if v is not None})

    class _Env:
        def __enter__(self) -> None:
            patch.__enter__()
            for k, v in values.items():
                if v is None:
                    os.environ.pop(k, None)

        def __exit__(self, *exc: Any) -> None:
            patch.__exit__(*exc)

    return _Env()


_LIBC: list[Any] = []
_LIVE = [0]  # how many blocks of ``resident_is_live`` are open: the outermost sets the threshold and restores it
# glibc's mallopt parameters; the mmap threshold at its default (an allocation of 128 KiB or more is mapped on its
# own, and its pages go back to the system when it is freed), and where glibc's own adjustment takes it once a block
# that large has been freed (reused from the heap without page faults: the speed of every forward outside a
# measure); each with the trim threshold glibc's adjustment pairs with it (twice it)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, MAPPED, HEAP = -1, -3, 128 * 1024, 32 * 1024 * 1024


def _libc() -> Any:
    """The C library the process runs on (None where ctypes cannot load it)."""
    if not _LIBC:
        import ctypes

        try:
            _LIBC.append(ctypes.CDLL(None))
        except OSError:
            _LIBC.append(None)
    return _LIBC[0]


def _mallopt(threshold: int) -> bool:
    mallopt = getattr(_libc(), "mallopt", None)
    return bool(mallopt is not None and mallopt(M_MMAP_THRESHOLD, threshold) == 1
                and mallopt(M_TRIM_THRESHOLD, 2 * threshold) == 1)


@contextlib.contextmanager
def resident_is_live() -> Iterator[None]:
    """Inside the block, every tensor of 128 KiB or more is mapped on its own and its pages go back when it is
    freed (glibc's mmap threshold at its default, fixed by ``mallopt``), so the process's resident memory is what
    is alive: what a measure or a probe held to the memory cap needs. glibc otherwise raises the threshold to the
    largest block freed (up to 32 MiB), after which such tensors come from the heap, where a larger one does not
    fit the hole a freed one left: BERT's live tensors peaked at 59 MB in a probe that grew the process by 69-80 MB,
    and a forward of growing tensors by twice what was alive, which no count of tensors predicts (issue #43).
    After it, the threshold stays at 32 MiB (where glibc's own would be): a forward outside a measure reuses the
    heap without page faults. Nothing changes where the C library has no ``mallopt`` (not glibc)."""
    outermost = not _LIVE[0]
    _LIVE[0] += 1
    done = outermost and _mallopt(MAPPED)
    try:
        yield
    finally:
        _LIVE[0] -= 1
        if done:
            _mallopt(HEAP)


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim(0)``, every arena): memory a forward
    freed stays resident otherwise, and a later forward of other sizes allocates beside it rather than in it, so
    the process's peak grows with each probe. False where the C library has no ``malloc_trim`` (not glibc)."""
    malloc_trim = getattr(_libc(), "malloc_trim", None)
    if malloc_trim is None:
        return False
    malloc_trim(0)
    return True


def describe_exception(exc: BaseException, limit: int = 4000) -> str:
    """``module.Type: message``; an exception without a message (a bare ``assert``) says so, and where it was
    raised, so that a finding never reads ``AssertionError:`` alone."""
    said = str(exc).strip()
    if not said:
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f"; raised at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name}" \
            if tb is not None else ""
        said = f"(no message{where})"
    text = f"{type(exc).__module__}.{type(exc).__qualname__}: {said}".replace("builtins.", "")
    if len(text) > limit:
        text = text[: limit - 20] + "\n... (truncated)"
    return text


def condition_problem(text: Any) -> str | None:
    """What is wrong with a torch-version condition (``"torch<2.14"``, ``"torch>=2.13,<2.15"``); None if right."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    if not isinstance(text, str) or not text.strip().startswith("torch"):
        return "write it as torch followed by version specifiers, e.g. \"torch<2.14\" or \"torch>=2.14\""
    try:
        SpecifierSet(text.strip()[len("torch"):].strip())
    except InvalidSpecifier as exc:
        return f"{exc}; e.g. \"torch<2.14\""
    return None


def condition_holds(text: str, torch_version: str) -> bool:
    """Whether ``torch_version`` (``2.13.0+cpu``) meets ``text`` (``torch<2.14``); local labels are ignored."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    spec = SpecifierSet(text.strip()[len("torch"):].strip(), prereleases=True)
    return Version(torch_version.split("+")[0]) in spec


__all__ = ["HarnessError", "output_problem", "describe_exception", "plural", "finite_int", "text_table", "markdown_table",
           "comma_list", "environment", "HUGE", "condition_problem", "condition_holds"]


def output_problem(path: str, directory: bool = False) -> str | None:
    """Why a file (``directory``: a folder of files) cannot be written at ``path``, or None: it is a directory
    (a file), a file stands where its folder must be, or its folder is not writable, or does not exist and the
    nearest existing one is not writable, so it cannot be made."""
    target = Path(path)
    if directory and target.exists() and not target.is_dir():
        return f"{target} is a file, not a directory"
    if not directory and target.is_dir():
        return f"{target} is a directory"
    folder = target if directory else target.parent
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, so the directory {folder} cannot be made"
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == folder:
            return f"the directory {folder} is not writable"
        return f"the directory {folder} does not exist and cannot be made ({existing} is not writable)"
    return None
