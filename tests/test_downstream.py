"""pytest-export adopted by another repository, as its README says, outside this checkout.

The package is built (sdist and wheel, from a copy of the checkout) and checked with twine. Then a small model
repository is written (two models, the README's first test and a test file of its own, a `pyproject.toml` for
pytest's settings and nothing else: no `requirements.txt`), and the GitHub Actions steps of the README's CI job
and of the "Many machines" workflow of docs/ci.md are read from the pages as YAML and run there in a fresh virtual
environment, `run:` step by `run:` step: the single job, the shards, then the gate job in an environment of its
own. The steps run as written but for the repository's URL, which names a git repository of this working tree
(committed to its `main` branch), and torch, which comes from pip's configured source (the local CPU wheel)
instead of PyTorch's CPU index: there is no network at test time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TORCH_INDEX = " --index-url https://download.pytorch.org/whl/cpu"
URL = "https://github.com/pytest-export/pytest-export"  # the repository's URL in the docs' install lines
TIMINGS: list[tuple[str, float]] = []

MODELS = {
    "models/__init__.py": '''
        from .conv import ConvNet
        from .mlp import MLP

        __all__ = ["ConvNet", "MLP"]
    ''',
    "models/mlp.py": '''
        import torch


        class MLP(torch.nn.Module):
            def __init__(self, d_in: int = 16, hidden: int = 32, d_out: int = 4):
                super().__init__()
                self.net = torch.nn.Sequential(
                    torch.nn.Linear(d_in, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, d_out)
                )

            def forward(self, x):
                return self.net(x)
    ''',
    "models/conv.py": '''
        import torch
        import torch.nn.functional as F


        class ConvNet(torch.nn.Module):
            """A residual conv block, global pooling and a linear head."""

            def __init__(self, channels: int = 8, classes: int = 10):
                super().__init__()
                self.stem = torch.nn.Conv2d(3, channels, 3, padding=1)
                self.bn = torch.nn.BatchNorm2d(channels)
                self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
                self.head = torch.nn.Linear(channels, classes)

            def forward(self, x):
                x = F.relu(self.bn(self.stem(x)))
                x = F.relu(self.conv(x)) + x
                return self.head(x.mean(dim=(2, 3)))
    ''',
    "tests/test_models.py": '''
        import pytest
        import torch
        from torch.export import Dim

        from models import MLP, ConvNet


        @pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}})
        def test_mlp():
            return MLP().eval(), (torch.randn(8, 16),)


        @pytest.mark.exportable(
            dynamic_shapes={"x": {0: Dim("batch", min=2, max=16), 2: Dim("height", min=8, max=64),
                                  3: Dim("width", min=8, max=64)}},
        )
        def test_convnet():
            return ConvNet().eval(), (torch.randn(2, 3, 16, 24),)
    ''',
    "pyproject.toml": '''
        [project]
        name = "models"
        version = "0.0.1"

        [tool.pytest.ini_options]
        testpaths = ["tests"]
        pythonpath = ["."]
    ''',
    ".gitignore": '''
        .hypothesis/
        export-report.json
        export-report.jsonl
    ''',
}


def _step(name: str, seconds: float) -> None:
    TIMINGS.append((name, seconds))
    print(f"[downstream] {seconds:7.1f} s  {name}", flush=True)


def _env(venv: Path, tmp: Path) -> dict[str, str]:
    """The environment of a CI step: the venv first on PATH, nothing of this session's pytest or checkout."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "HYPOTHESIS", "COV_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(venv), CI="true",
               GITHUB_STEP_SUMMARY=str(tmp / "step-summary.md"),
               PYTEST_XDIST_AUTO_NUM_WORKERS="1")  # -n auto: one worker, whatever the machine has (3 small cases)
    return env


def _sh(command: str, cwd: Path, env: dict[str, str], name: str | None = None, timeout: float = 600) -> str:
    """Run one `run:` step in bash, as GitHub Actions does; it must exit 0."""
    start = time.perf_counter()
    proc = subprocess.run(["bash", "-eo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    _step(name or command, time.perf_counter() - start)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"$ {command}\n(exit status {proc.returncode})\n{out[-6000:]}"
    return out


def _workflows(page: Path) -> list[dict]:
    import yaml  # PyYAML, in the [dev] extra: a workflow that is no valid YAML would not run on GitHub either

    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)]


def _workflow_with(page: Path, *jobs: str) -> dict:
    found = [w for w in _workflows(page) if set(w["jobs"]) == set(jobs)]
    assert len(found) == 1, f"{page.name}: one workflow with the jobs {jobs}"
    return found[0]


def _runs(job: dict) -> list[str]:
    """The job's `run:` steps in order (the `uses:` steps are the runner's: checkout, Python, artifacts)."""
    return [step["run"] for step in job["steps"] if "run" in step]


def _local(command: str, repo: Path) -> str:
    """The one change to an install step: the local git repository for the repository's URL (and torch from pip's
    configured source: the local CPU wheel)."""
    if command.startswith("pip install torch"):
        assert TORCH_INDEX in command, command
        return command.replace(TORCH_INDEX, "")
    assert "pytest-export" not in command or command.count(URL) == 1, command
    return command.replace(URL, f"file://localhost{repo}")  # a host: the pip of a new venv (23.2) wants one


def _copy(dest: Path) -> Path:
    """A copy of the working tree, its uncommitted changes included."""
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
        ".git", ".venv", "venv", ".tox", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis",
        ".pytest_cache"))
    return dest


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist and the wheel, built with `python -m build` from a copy of the checkout."""
    tmp = tmp_path_factory.mktemp("dist")
    src = _copy(tmp / "src")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(tmp / "dist"), str(src)],
                          capture_output=True, text=True, timeout=600)
    _step("python -m build (sdist, then the wheel from it)", time.perf_counter() - start)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return tmp / "dist"


def test_the_package_builds_and_passes_twine(dist):
    version = re.search(r'(?m)^version = "(.+)"$', (ROOT / "pyproject.toml").read_text()).group(1)
    wheel = dist / f"pytest_export-{version}-py3-none-any.whl"
    sdist = dist / f"pytest_export-{version}.tar.gz"
    assert sorted(dist.iterdir()) == sorted([wheel, sdist])
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("PASSED") == 2, proc.stdout + proc.stderr
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"pytest_export", f"pytest_export-{version}.dist-info"}, names
    assert f"pytest_export-{version}.dist-info/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"pytest_export-{version}.dist-info/METADATA").decode()
    assert "Description-Content-Type: text/markdown" in metadata and "License-Expression: MIT" in metadata
    for extra in ("xdist", "zoo", "onnx", "dev"):
        assert f"Provides-Extra: {extra}" in metadata
    members = {m.split("/", 1)[1] for m in tarfile.open(sdist).getnames() if "/" in m}
    for path in ("README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml", "pytest_export/plugin.py",
                 "docs/options.md", "tests/test_downstream.py", "corpus/test_basics.py"):
        assert path in members, path


@pytest.fixture(scope="module")
def origin(tmp_path_factory) -> Path:
    """A git repository of the working tree, committed to its `main` branch: what the docs' `git+` URL names."""
    origin = _copy(tmp_path_factory.mktemp("origin") / "pytest-export")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "the working tree"]):
        subprocess.run([*git, *args], cwd=origin, check=True, capture_output=True, timeout=120)
    return origin


def test_a_model_repository_adopts_it(origin, tmp_path):
    """The README's install and CI job, and the shards and gate of docs/ci.md, run in a model repository."""
    repo = tmp_path / "models-repo"
    for path, text in MODELS.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(textwrap.dedent(text).lstrip())
    readme = (ROOT / "README.md").read_text()
    first_test = re.search(r"\n## A first test\n.*?```python\n(.*?)```", readme, re.S).group(1)
    assert first_test.startswith("# tests/test_export.py\n")
    (repo / "tests" / "test_export.py").write_text(first_test)  # the README's first test, as it names it
    cases = 3

    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    _step("python -m venv", time.perf_counter() - start)
    env = _env(tmp_path / "venv", tmp_path)

    # the README's job: install, the baseline written once as the README says, the run
    job = _workflow_with(ROOT / "README.md", "export")["jobs"]["export"]
    assert job == _workflow_with(ROOT / "docs" / "ci.md", "export")["jobs"]["export"]  # one recipe in both
    runs = _runs(job)
    installs = [r for r in runs if r.startswith("pip install")]
    assert [r.split()[2] for r in installs] == ["torch==2.13.0", '"pytest-export[xdist]'], installs
    assert all(URL + "@main" in r for r in installs[1:]), installs
    assert not (repo / "requirements.txt").exists()  # a repository without one: its step must pass over it
    baseline_cmd = next(line for block in re.findall(r"```bash\n(.*?)```", readme, re.S)
                        for line in block.splitlines() if "--export-baseline-update" in line)
    for command in runs:
        if command.startswith("pytest") and not (repo / "export-baseline.json").exists():
            _sh(baseline_cmd, repo, env)
        out = _sh(_local(command, origin), repo, env, name=command)
        assert "Failed to initialize NumPy" not in out, out[-3000:]  # numpy comes with pytest-export
    assert _sh('python -c "import pytest_export; print(pytest_export.__version__)"', repo, env).strip() == "0.1.0"
    report = json.loads((repo / "export-report.json").read_text())
    assert len(report["cases"]) == cases and {c["outcome"] for c in report["cases"]} == {"passed"}, report["cases"]
    assert not report.get("partial")
    assert (repo / "export-report.jsonl").exists() and (tmp_path / "step-summary.md").read_text().strip()

    # "Many machines": the shards, each as one machine of the matrix would run it, then the gate job
    workflow = _workflow_with(ROOT / "docs" / "ci.md", "shard", "gate")
    shard, gate = workflow["jobs"]["shard"], workflow["jobs"]["gate"]
    for command in _runs(shard):
        if "pip install" in command:
            assert command in runs, "the shards install as the single job does (already done in this venv)"
            continue
        for group in shard["strategy"]["matrix"]["group"]:
            _sh(command.replace("${{ matrix.group }}", str(group)), repo, env,
                name=command.replace("${{ matrix.group }}", str(group)))
    shards = sorted(p.name for p in repo.glob("shard-*.json*"))
    assert shards == [f"shard-{g}.json{s}" for g in shard["strategy"]["matrix"]["group"] for s in ("", "l")]

    checkout = tmp_path / "gate-checkout"  # the gate job: a fresh checkout, the shards' artifacts, no torch
    shutil.copytree(repo, checkout, ignore=shutil.ignore_patterns(
        "shard-*", "export-report*", ".hypothesis", ".pytest_cache", "__pycache__"))
    for name in shards:
        shutil.copy(repo / name, checkout / name)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "gate-venv")], check=True, timeout=300)
    gate_env = _env(tmp_path / "gate-venv", tmp_path)
    (tmp_path / "step-summary.md").write_text("")
    for command in _runs(gate):
        _sh(_local(command, origin), checkout, gate_env, name=command)
    probe = subprocess.run(["python", "-c", "import torch"], cwd=checkout, env=gate_env, capture_output=True)
    assert probe.returncode != 0, "the gate job's environment has no torch: the report commands need none"
    merged = json.loads((checkout / "report.json").read_text())
    assert sorted(c["nodeid"] for c in merged["cases"]) == sorted(c["nodeid"] for c in report["cases"])
    assert {c["outcome"] for c in merged["cases"]} == {"passed"} and not merged.get("partial")
    durations = json.loads((checkout / ".test_durations").read_text())
    assert sorted(durations) == sorted(c["nodeid"] for c in report["cases"])
    assert "passed" in (tmp_path / "step-summary.md").read_text()
    print(f"[downstream] total {sum(s for _, s in TIMINGS):.1f} s over {len(TIMINGS)} steps", flush=True)
