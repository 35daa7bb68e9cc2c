"""The figures of the README and docs/ are the ones a run gives, not typed ones (issue #34).

Every count the pages state (``N cases``, ``N models``, ``N architectures``, ``N stages``) is either checked here
against what pytest collects (the corpus, the zoo and its slices) or the stage list of ``declare.options.ORDER``, or it
stands in a section that says when, with which torch and on how many cores it was measured. So does every time
a page quotes. Quoted output (inside backticks, or a ``text`` or ``json`` block) is an example, not a claim.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_export.declare.options import ORDER

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
UNDATED = ("docs/dynamic-shapes.md", "docs/stages.md")  # quote times of their examples without a date yet
COUNT = re.compile(r"\b\d[\d,]* (?:cases?|models|architectures|stages)\b")
TIME = re.compile(r"\b\d+(?:\.\d+)?(?: vs \d+(?:\.\d+)?)? ?(?:s|min|minutes|seconds)\b")
# a section that states a measurement: its date, its torch and its cores
DATED = (re.compile(r"\b20\d\d-\d\d-\d\d\b"), re.compile(r"\btorch 2\.\d+"), re.compile(r"\b\d+(?: cores|-core)\b"))
# times that are settings or documented behaviour, not measurements
SETTINGS = ("30 s of 16 kHz", "30 s budget", "at least 30 s", "has run 3 s", "changes the 3 s", "5 s later",
            "budget of 30 s", "at least 10 s", "default is 30 s", "at most 300 s")
WORDS = {"five": 5, "six": 6}


def _collected(*args: str) -> int:
    """How many tests ``pytest --collect-only`` selects with these arguments, run from the repository's root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--export-check", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    found = re.search(r"^(\d+)(?:/\d+)? tests? collected", proc.stdout, re.M)
    assert proc.returncode == 0 and found, proc.stdout[-3000:] + proc.stderr[-3000:]
    return int(found.group(1))


@pytest.fixture(scope="module")
def collected() -> dict[str, int]:
    """The corpus as a plain run selects it, the zoo (its real-width cases left out, as `--export-tags zoo` leaves
    them), and the zoo's slices by tag."""
    pytest.importorskip("transformers")  # without it the zoo's files skip and collect nothing
    return {"corpus": _collected("corpus"), "zoo": _collected("corpus/zoo", "--export-tags", "zoo"),
            "zoo-ci": _collected("corpus/zoo", "--export-tags", "zoo-ci"),
            "width": _collected("corpus/zoo", "--export-tags", "width"),
            "onnx": _collected("corpus/zoo", "--export-tags", "onnx"),
            "executorch": _collected("corpus/zoo", "--export-tags", "executorch"),
            "breadth-ci": _collected("corpus/breadth", "--export-tags", "breadth-ci")}


def _number(text: str) -> int:
    return WORDS[text] if text in WORDS else int(text.replace(",", ""))


def _claims(collected: dict[str, int]) -> list[tuple[str, str, list[int]]]:
    """(page, pattern, the values its groups must have): each count the pages state about the corpus."""
    zoo, ci, width, onnx = collected["zoo"], collected["zoo-ci"], collected["width"], collected["onnx"]
    return [
        ("docs/corpus.md", r"everything but the zoo's (\d+) non-CI and (\d+) real-width cases and the breadth slice "
                           r"beyond its (\d+)-case sample: (\d+) cases",
         [zoo - ci, width, collected["breadth-ci"], collected["corpus"]]),
        ("docs/corpus.md", r"(?s)holds (\d+) cases of \d+ real architectures.*?\(and the (\w+)", [zoo, width]),
        ("docs/corpus.md", r"the (\w+) cases tagged `zoo-ci`", [ci]),
        ("docs/corpus.md", r"the same (\d+) cases", [zoo]),
        ("docs/corpus.md", r"the (\w+) `zoo-ci` cases and GPT-2\)", [ci]),
        ("docs/corpus.md", r"\((\d+) cases: \d+ passed, \d+ xfailed for GPT-2", [onnx]),
        ("docs/corpus.md", r"\((\d+) cases: \d+ passed, \d+ xfailed for\nExecuTorch", [collected["executorch"]]),
        ("docs/corpus.md", r"holds (\w+) released configurations", [width]),
    ]


def _prose(text: str) -> str:
    """The page without quoted output: backtick spans (over line ends too) and text or JSON blocks blanked, its
    lines kept; other code blocks (commands and their comments) stay."""
    text = re.sub(r"```(?:text|json)\n.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    parts = re.split(r"(^```.*?^```$)", text, flags=re.S | re.M)
    blank = lambda m: "``" + "\n" * m.group(0).count("\n")  # noqa: E731
    return "".join(p if p.startswith("```") else re.sub(r"`[^`]*`", blank, p) for p in parts)


def _sections(text: str) -> list[tuple[int, str]]:
    """The page cut at its headings (not at a `#` comment inside a code block): (first line's number, text)."""
    out, current, start, fenced = [], [], 1, False
    for number, line in enumerate(text.splitlines(), 1):
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced and current:
            out.append((start, "\n".join(current)))
            current, start = [], number
        current.append(line)
    return [*out, (start, "\n".join(current))]


def _dated(section: str) -> bool:
    return all(p.search(section) for p in DATED)


@pytest.mark.slow
def test_every_count_about_the_corpus_is_what_pytest_collects(collected):
    for page, pattern, values in _claims(collected):
        found = re.search(pattern, (ROOT / page).read_text(encoding="utf-8"))
        assert found, f"{page}: no longer says {pattern!r}: keep the claim or change this test with it"
        stated = [_number(g) for g in found.groups()]
        assert stated == values, f"{page}: {found.group(0)!r} states {stated}, collection gives {values}"


def test_the_zoo_table_has_a_row_per_zoo_case_and_the_outcomes_the_page_counts(collected):
    text = (ROOT / "docs" / "corpus.md").read_text(encoding="utf-8")
    zoo = text.split("\n## The zoo\n", 1)[1].split("\n### ", 1)[0]
    table = [ln for ln in zoo.splitlines() if ln.startswith("| ") and not ln.startswith(("| model ", "|---"))]
    outcomes = [ln.split(" | ")[3] for ln in table]
    passed, xfailed = (int(n) for n in re.search(r"# (\d+) passed, (\d+) xfailed: ", zoo).groups())
    assert len(table) == passed + xfailed == collected["zoo"]
    assert (outcomes.count("passed"), sum(o.startswith("xfail") for o in outcomes)) == (passed, xfailed)
    architectures = int(re.search(r"holds \d+ cases of (\d+) real architectures", zoo).group(1))
    classes = {re.match(r"`(\w+)`", ln.split(" | ")[1]).group(1) for ln in table}  # a class per architecture
    assert len(classes) == architectures


def test_the_readme_names_the_stages_a_run_has():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    default = re.search(r"each case runs through the stages (.*?);", readme, re.S).group(1)
    deployment = re.search(r"the deployment stages \((.*?)\)", readme, re.S).group(1)
    default_stages, deployment_stages = re.findall(r"`(\w+)`", default), re.findall(r"`(\w+)`", deployment)
    assert [s for s in ORDER if s in default_stages] == default_stages  # in run order
    opt_in = [s for s in ORDER if s not in default_stages]  # unflatten, cuda, aoti, onnx: asked for, or a device
    assert deployment_stages == ["retrace", *opt_in]
    assert set(default_stages) | set(opt_in) == set(ORDER)


def test_a_green_run_names_the_stages_the_readme_lists(pytester):
    """The README's stage list is what a run of its first test passes through, as its one-line summary says."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"`(\w+)`", re.search(r"each case runs through the stages (.*?);", readme, re.S).group(1))
    pytester.makepyfile(test_export=re.search(r"```python\n(# tests/test_export.py\n.*?)```", readme, re.S).group(1))
    result = pytester.runpytest("--export-check", "-p", "no:cacheprovider", "-p", "no:xdist")
    assert result.ret == 0
    line = next(ln for ln in result.outlines if ln.startswith("pytest-export: 1 case: 1 passed"))
    assert line.endswith(f"{len(listed)} stages: " + ", ".join(listed)), line


def _loose(collected: dict[str, int], pages: list[Path]) -> list[str]:
    claims = _claims(collected)
    loose = []
    for page in pages:
        name = page.relative_to(ROOT).as_posix()
        text = page.read_text(encoding="utf-8")
        checked = [(text[:m.start()].count("\n") + 1, text[:m.end()].count("\n") + 1, m.group(0))
                   for p, pattern, _ in claims if p == name for m in re.finditer(pattern, text)]
        for start, section in _sections(_prose(text)):
            if _dated(section):
                continue
            for m in [*COUNT.finditer(section), *TIME.finditer(section)]:
                if any(s in section[max(0, m.start() - 30):m.end() + 30] for s in SETTINGS):
                    continue
                line = start + section[:m.start()].count("\n")
                if any(a <= line <= b and m.group(0) in claim for a, b, claim in checked):
                    continue
                loose.append(f"{name}:{line}: {m.group(0)!r}")
    return loose


def test_every_count_and_time_the_pages_state_is_checked_or_dated(collected):
    loose = _loose(collected, [p for p in PAGES if p.relative_to(ROOT).as_posix() not in UNDATED])
    assert not loose, ("figures neither checked against collection (tests/test_doc_figures.py) nor stated with "
                       "the date, torch and cores they were measured on:\n" + "\n".join(loose))


def test_the_times_of_the_stage_and_dynamic_shape_pages_are_dated(collected):
    assert not _loose(collected, [ROOT / p for p in UNDATED])