"""Failures explained, in the user's terms: ``frames`` finds the model's own lines in a failure (and the pytree
registration a class of the user's needs); ``diagnose`` a failed
export (torch's suggested fix, else ``draft_export``); ``promise`` whether a suggested fix keeps the declared
promise (no constant, no root kept narrower than written); ``refusal`` why a program refuses an in-range size, and the
change to the model that keeps the promise; ``fixes`` the ``dynamic_shapes`` a failing program really accepts,
exported and probed again before it is offered.

``frames`` imports nothing of the package, ``promise`` only helpers; ``diagnose`` and ``refusal`` only helpers below them
and the guard proof (``proof/``, which says where torch recorded each guard);
``fixes`` sits above the probes it reruns (``context``, ``probes``) and only the ``guards`` stage imports it. No
imports here, so that importing one module of the package runs no other.
"""
