"""The zoo: real architectures built from ``transformers`` configuration classes, small and with random weights.

No case downloads anything: every model comes from a config and ``torch.manual_seed(0)``, never from
``from_pretrained``. The hub is switched off before ``transformers`` is imported, so a case that reached for
the network would fail here instead of hanging on a CI machine without one.

The cases tagged ``onnx`` (the ``zoo-ci`` six and GPT-2) are the zoo's ONNX slice: ``pytest corpus/zoo
--export-check --export-onnx --export-tags onnx`` runs the ``onnx`` stage on them (the ``[onnx]`` extra; the whole
zoo with ``onnx`` costs more than 15 minutes on 2 cores). The same seven, tagged ``executorch``, are its ExecuTorch
slice: ``pytest corpus/zoo --export-check --export-executorch --export-tags executorch`` (executorch installed).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
