"""The zoo: real architectures built from ``transformers`` configuration classes, small and with random weights.

No case downloads anything: every model comes from a config and ``torch.manual_seed(0)``, never from
``from_pretrained``. The hub is switched off before ``transformers`` is imported, so a case that reached for
the network would fail here instead of hanging on a CI machine without one.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
