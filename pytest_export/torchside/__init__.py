"""The ground floor: what the harness sees of torch and of the user's module around a forward call. ``observe``
runs and observes one forward call (every forward the harness runs goes through it); ``modstate`` keeps the
module's state (tensors and Python attributes) as the user gave it; ``compare`` compares pytrees of results;
``ops`` knows the ATen ops a program uses and which are Core ATen; ``torchlog`` keeps torch's loggers safe under
pytest and captures what torch prints during a case; ``training`` finds submodules left in training mode;
``frames`` finds the model's own frames in a failure; ``timeout`` holds the nestable time limits every forward
call checks; ``leftovers`` clears what a call leaves outside the module (a vmap level a raising program left on,
fake tensors a fake run left in the model's own caches).

It imports nothing of the package but ``util``, and torch only where a module watches it: every layer above may
read it. No imports here, so that importing ``timeout`` (the session does, with the plugin) runs no other.
"""
