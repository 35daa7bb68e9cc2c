"""The conformance corpus: each test is an export case in the form users write.

Marked cases carry ``tags=[...]``; each tag becomes a marker at collection. Tests that call the
``export_check`` fixture pass their tags to it and carry the ``api`` marker, registered here, so that
``--export-tags api`` and ``-m api`` select them too.
"""


def pytest_configure(config):
    config.addinivalue_line("markers", "api: a corpus test that calls a torch.export API on the exported program")
