"""What the user wrote, read and checked before anything runs: ``options`` holds the marker's keywords and the
per-case and session options (and ``STAGES`` / ``ORDER``, the one list of stages); ``settings`` the command line
and ini table; ``case`` the module and inputs a marked test returns; ``shapes`` the model of a ``dynamic_shapes``
declaration (what was promised; ``audit`` reads what export kept of it); ``blob`` the ``reproduce=`` blob, read and
checked; ``values`` the values an option holds (a memory size, a runtime's tolerances), parsed.

It imports helpers only (``util``, ``tags`` and ``variants`` for their lists), no
torch at import and nothing that runs a case. No imports here: ``settings`` loads with the plugin in every pytest
run, and must not bring the rest along.
"""
