"""settings: one table of options read by pytest_addoption and by the session alike."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_export.declare import settings
from pytest_export.declare.options import SessionOptions

# public names: an option added or renamed must be added here on purpose
NAMES = ("export_check", "export_tags", "export_report", "export_core_aten", "export_examples", "export_max_size",
         "export_modes", "export_devices", "export_skip_stages", "export_aoti", "export_timeout", "export_budget",
         "export_max_memory", "export_require_numerics", "export_baseline",
         "export_baseline_update", "export_baseline_warn_stale", "export_coverage", "export_summary_md",
         "export_no_diagnose", "export_diagnose", "export_summary", "export_repro", "export_onnx", "export_executorch",
         "export_executorch_backends", "export_runtime_tolerance")


class Config:
    """getoption / getini over two dicts, as pytest.Config answers them."""

    def __init__(self, options=None, ini=None):
        self.options, self.ini = options or {}, ini or {}

    def getoption(self, name):
        return self.options.get(name)

    def getini(self, name):
        return self.ini.get(name, "")


def test_the_table_holds_every_public_option_and_every_session_field():
    assert tuple(s.name for s in settings.SETTINGS) == NAMES
    assert all(s.flag == "--" + s.name.replace("_", "-") for s in settings.SETTINGS)
    fields = {f.name for f in dataclasses.fields(SessionOptions)}
    assert {s.field for s in settings.SETTINGS if s.field} == fields


def test_pytest_adds_every_setting_as_an_option_and_an_ini_value(pytester):
    config = pytester.parseconfig()
    for s in settings.SETTINGS:
        assert config.getoption(s.name) is None, s.name
        assert not config.getini(s.name), s.name


def test_defaults_are_the_session_options_defaults():
    assert settings.read_session_options(Config()) == SessionOptions()


def test_command_line_wins_over_ini_and_values_are_parsed():
    got = settings.read_session_options(Config(
        {"export_examples": "3", "export_modes": ["strict,non-strict", "strict"], "export_no_diagnose": True},
        {"export_examples": "9", "export_timeout": "2.5", "export_skip_stages": "fuzz, guards"}))
    assert (got.examples, got.timeout, got.modes, got.skip_stages, got.diagnose) == (
        3, 2.5, ("strict", "non-strict"), ("fuzz", "guards"), False)
    assert settings.value(Config(ini={"export_tags": "a, b c"}), "export_tags") == ["a", "b", "c"]


@pytest.mark.parametrize("name, raw, expected", [
    ("export_examples", "-1", "--export-examples must be a non-negative integer, got '-1'"),
    ("export_max_size", "many", "--export-max-size must be a non-negative integer, got 'many'"),
    ("export_timeout", "0", "--export-timeout must be a positive number of seconds, got '0'"),
    ("export_timeout", "nan", "--export-timeout must be a positive number of seconds, got 'nan'"),
    ("export_devices", ["gpu"], "--export-devices: unknown value 'gpu'; valid: cpu, cuda, cuda:N"),
    ("export_skip_stages", ["export"], "--export-skip-stages: unknown or required stage 'export'"),
])
def test_a_bad_value_is_a_usage_error_naming_the_option(name, raw, expected):
    with pytest.raises(pytest.UsageError, match="^" + expected.replace("[", r"\[").replace("(", r"\(")):
        settings.read_session_options(Config({name: raw}))


def test_needs_check_lists_the_flags_given_in_table_order():
    config = Config({"export_baseline": "b.json", "export_report": "r.json", "export_examples": "3"})
    assert settings.given_without_check(config) == ["--export-report", "--export-baseline"]
    assert settings.any_given(config) and not settings.any_given(Config())


def test_help_texts_are_plain_text(pytester):
    """--help prints them as they are: no reStructuredText markup (backticks) in what users read."""
    result = pytester.runpytest("--help")
    section = result.stdout.str().split("torch.export conformance (pytest-export)")[1].split("\n\n")[0]
    assert "--export-budget" in section
    assert "`" not in section, section
