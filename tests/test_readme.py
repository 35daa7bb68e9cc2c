"""The README and the pages of docs/ render as written and stay true to the package: every table is whole (no
blank line cuts rows off it, every row has the header's cells), every relative link points at a file of the
repository and at a heading there, every option and marker keyword is documented, the README stays short and
leads with the install, its Develop section holds the two commands `.ci/run` runs, and no page refers to a
file outside the repository."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]  # what the README links and the table check covers
MARKDOWN = [*PAGES, ROOT / "CHANGELOG.md", ROOT / "tests" / "README.md"]  # every Markdown file of the repository


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _cells(line: str) -> list[str]:
    """A table row's cells: split on pipes outside code spans (`a | b` is one cell)."""
    cells, cell, code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell)
            cell = ""
        else:
            cell += ch
    return cells + [cell]


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code."""
    out, fenced = [], False
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((no, line))
    return out


def _blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each run of table lines, outside fenced code."""
    out, run, start, last = [], [], 0, -1
    for no, line in _prose(text):
        if line.startswith("|") and (not run or no == last + 1):
            if not run:
                start = no
            run.append(line)
        else:
            if run:
                out.append((start, run))
            run = [line] if line.startswith("|") else []
            start = no
        last = no
    if run:
        out.append((start, run))
    return out


def test_the_pages_are_the_readme_and_docs():
    assert DOCS, "docs/ holds the reference the README links"
    assert all(page.exists() for page in MARKDOWN)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_table_is_whole(page):
    problems = []
    for start, rows in _blocks(page.read_text(encoding="utf-8")):
        if len(rows) < 2 or not re.fullmatch(r"\|?(\s*:?-{3,}:?\s*\|)+\s*:?-{0,}:?\s*\|?", rows[1].strip()):
            problems.append(f"line {start}: table rows without a header and a --- line (cut off by a blank line?)")
            continue
        width = len(_cells(rows[0]))
        for i, row in enumerate(rows[2:], 2):
            if len(_cells(row)) != width:
                problems.append(f"line {start + i}: {len(_cells(row))} cells, the header has {width}")
    assert not problems, f"{_rel(page)}:\n" + "\n".join(problems)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation but '-' and '_' removed, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose(page.read_text(encoding="utf-8")):
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            base = _anchor(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")  # GitHub numbers a repeated heading's anchor
    return out


def _links(page: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link outside fenced code and code spans."""
    out = []
    for no, line in _prose(page.read_text(encoding="utf-8")):
        line = re.sub(r"`[^`]*`", "", line)
        out += [(no, target) for target in re.findall(r"\]\(([^)\s]+)\)", line)]
    return out


def test_anchor_rules():
    assert _anchor("The run's scope") == "the-runs-scope"
    assert _anchor("When `-n` pays off") == "when--n-pays-off"
    assert _anchor("Reports of shards, and torch upgrades") == "reports-of-shards-and-torch-upgrades"
    assert _anchor("`max_memory`") == "max_memory"


@pytest.mark.parametrize("page", [*PAGES, ROOT / "CHANGELOG.md", ROOT / "tests" / "README.md"], ids=_rel)
def test_every_relative_link_resolves(page):
    """A link to a file of the repository points at one that exists; its `#anchor` at a heading there."""
    problems = []
    for no, target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(ROOT):
            problems.append(f"line {no}: {target}: outside the repository")
        elif not dest.exists():
            problems.append(f"line {no}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            problems.append(f"line {no}: {target}: no heading #{anchor} in {_rel(dest)}")
    assert not problems, f"{_rel(page)}:\n" + "\n".join(problems)


def test_the_readme_links_every_page_of_docs():
    linked = {(ROOT / path).resolve() for _, target in _links(README) for path in [target.partition("#")[0]] if path}
    assert not [_rel(page) for page in DOCS if page not in linked]


def _outside(page: Path, text: str) -> list[str]:
    """Paths a page names that the repository does not hold: one climbing out of it (``../x``), or a Markdown file
    under a folder (``notes/STYLE.md``, links and code spans alike) that exists neither beside the page nor at the
    root. Users have the repository only."""
    found = [tok for tok in re.findall(r"(?:\.\./)+[\w./-]*", text)
             if not (page.parent / tok).resolve().is_relative_to(ROOT)]
    found += [tok for tok in re.findall(r"(?<![\w.$/-])((?:\.\./)*[\w.-]+(?:/[\w.-]+)+\.md)\b", text)
              if not any((base / tok).resolve().exists() for base in (page.parent, ROOT))]
    return sorted(set(found))


def test_a_path_outside_the_repository_is_found():
    page = ROOT / "docs" / "ci.md"
    assert _outside(page, "see ../../elsewhere/NOTES.md and `notes/STYLE.md`") == [
        "../../elsewhere/NOTES.md", "notes/STYLE.md"]
    assert _outside(page, "see [options](options.md) and docs/stages.md, ../README.md") == []


@pytest.mark.parametrize("page", MARKDOWN, ids=_rel)
def test_no_page_refers_to_files_outside_the_repository(page):
    assert not _outside(page, page.read_text(encoding="utf-8"))


def test_every_option_and_marker_keyword_is_documented():
    from pytest_export.declare.options import KEYWORDS
    from pytest_export.declare.settings import SETTINGS

    options = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    rows = [line for _, line in _prose(options) if line.startswith("| `")]
    flags = {m for row in rows for m in re.findall(r"`(--export-[a-z-]+)", _cells(row)[0])}
    inis = {_cells(row)[1].strip().strip("`") for row in rows if len(_cells(row)) > 2}
    keywords = {m for row in rows for m in re.findall(r"`(\w+)`", _cells(row)[0])}
    assert not [s.flag for s in SETTINGS if s.flag not in flags], "options without a row in docs/options.md"
    assert not [s.name for s in SETTINGS if s.name not in inis], "ini names missing from docs/options.md"
    assert not [k for k in KEYWORDS if k not in keywords], "marker keywords without a row in docs/options.md"


def test_the_readme_is_for_users():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 220
    headings = [line for _, line in _prose(text) if line.startswith("## ")]
    assert headings[0] == "## Install" and headings.index("## Install") < headings.index("## Develop")
    install = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    for extra in ("[xdist]", "[zoo]", "[onnx]"):
        assert extra in install
    assert 'pip install "pytest-export[xdist]"' in install
    assert "git+https://github.com/pytest-export/pytest-export@main" in install
    assert "python -m build" in install and "--index-url https://download.pytorch.org/whl/cpu" in install
    assert ".hypothesis/" in text


def test_no_workflow_installs_the_checkout():
    """The GitHub Actions examples are for a model repository: they install pytest-export, never `-e .`."""
    workflows = [block for page in PAGES for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)]
    assert len(workflows) >= 3  # the README's job, the CI gate of docs/ci.md, the shards of "Many machines"
    for block in workflows:
        assert "pip install -e" not in block and "-e ." not in block
        assert re.search(r'pip install (--no-deps )?"?pytest-export\b', block)


def test_develop_holds_the_two_commands_ci_runs():
    develop = README.read_text(encoding="utf-8").split("\n## Develop\n", 1)[1].split("\n## ", 1)[0]
    first, second = re.findall(r"```bash\n(.*?)\n```", develop, re.S)
    assert "pip install" in first and "pytest corpus --export-check" in first
    # torch's CPU build from PyTorch's CPU index, as its install guide gives it; an unreachable index is given up
    # at once (no retries) for pip's configured source, and tox.ini takes torch the same way
    cpu = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu --retries 0 "
    assert cpu in first and "|| pip install torch==2.13.0;" in first
    tox = (ROOT / "tox.ini").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu --retries 0" in tox
    assert second.startswith(". .venv/bin/activate && ") and "pytest" in second  # works from a new shell
    ci = (ROOT / ".ci" / "run").read_text()
    assert '"\\n## Develop\\n"' in ci and "readme_command 0" in ci and "readme_command 1" in ci
    assert "tox -e corpus-torch214" in ci


def test_the_version_is_one():
    """`pytest_export.__version__`, the installed metadata and pyproject's version agree; the changelog has it."""
    import importlib.metadata

    import pytest_export

    version = re.search(r'(?m)^version = "(.+)"$', (ROOT / "pyproject.toml").read_text()).group(1)
    assert pytest_export.__version__ == importlib.metadata.version("pytest-export") == version
    assert f"## {version}" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_numpy_is_a_dependency_so_torch_does_not_warn():
    """torch's wheels do not require NumPy and warn "Failed to initialize NumPy" on every run without it: it is a
    dependency of pytest-export, as the README says, and with it installed importing torch does not warn."""
    import tomllib

    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.match(r"numpy\b", d) for d in dependencies), dependencies
    assert "NumPy" in README.read_text(encoding="utf-8").split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    code = ("import warnings\nwith warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n    import torch\n"
            "print([str(w.message) for w in caught if 'NumPy' in str(w.message)])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
