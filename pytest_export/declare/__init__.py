"""What the user wrote, read and checked before anything runs: ``options`` holds the marker's keywords and the
per-case and session options (and ``STAGES`` / ``ORDER``, the one list of stages); ``settings`` the command line
and ini table; ``case`` the module and inputs a marked test returns; ``shapes`` the model of a ``dynamic_shapes``
declaration (what was promised; ``audit`` reads what export kept of it); ``blob`` the ``reproduce=`` blob, read and
checked; ``values`` the values an option holds (a memory size, a runtime's tolerances), parsed; ``tags`` a case's
tags (``--export-tags``, and markers for ``-m``); ``variants`` the tracing modes and devices a case runs in
(``--export-modes``, ``--export-devices``).

It imports helpers only (``util``), no torch at import and nothing that runs a case. No imports here: ``settings``
and ``tags`` load with the plugin in every pytest run, and must not bring the rest along.
"""
