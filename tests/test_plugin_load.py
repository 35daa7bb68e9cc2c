"""The plugin must cost nothing where it is not used: torch is never imported at plugin import time."""

from __future__ import annotations

import subprocess
import sys


def _imports_torch(args: list[str], cwd) -> tuple[bool, str]:
    code = (
        "import sys, pytest\n"
        f"rc = pytest.main({args!r})\n"
        "print('TORCH-IMPORTED' if 'torch' in sys.modules else 'TORCH-ABSENT')\n"
        "print('PLUGIN-LOADED' if 'pytest_export.plugin' in sys.modules else 'PLUGIN-MISSING')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    return "TORCH-IMPORTED" in out.stdout, out.stdout + out.stderr


def test_pytest_version_does_not_import_torch(tmp_path):
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "pytest", "--version"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported


def test_run_without_marker_does_not_import_torch(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_a():\n    assert 1 + 1 == 2\n")
    imported, out = _imports_torch(["-q", "-p", "no:cacheprovider", str(tmp_path)], tmp_path)
    assert "1 passed" in out and "PLUGIN-LOADED" in out, out
    assert not imported, out


def test_export_check_over_unmarked_tests_does_not_import_torch(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_a():\n    pass\n")
    imported, out = _imports_torch(["-q", "--export-check", "-p", "no:cacheprovider", str(tmp_path)], tmp_path)
    assert "1 passed" in out, out
    assert not imported, out


def test_package_import_does_not_import_torch():
    code = "import sys, pytest_export, pytest_export.plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_run_without_the_plugins_options_loads_only_its_hooks(tmp_path):
    """A run that uses neither --export-check nor the fixture loads the hooks, not the harness behind them."""
    (tmp_path / "test_plain.py").write_text("def test_a():\n    pass\n")
    code = (
        "import sys, pytest\n"
        f"rc = pytest.main(['-q', '-p', 'no:cacheprovider', {str(tmp_path)!r}])\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith('pytest_export')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    line = next(x for x in out.stdout.splitlines() if x.startswith("LOADED"))
    assert "'pytest_export.plugin'" in line, out.stdout + out.stderr
    for heavy in ("declare.options", "results", "api", "runner", "declare.variants"):
        assert f"'pytest_export.{heavy}'" not in line, line
