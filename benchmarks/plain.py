"""The same work as `pytest --export-check` on the 20 benchmark cases, done directly with torch.

Per case: two eager forwards, one export, one forward of the exported program, save to memory and to a
file and load both, a forward of each, run_decompositions() and a forward of the decomposed program.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from cases import make_cases  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, module, args in make_cases():
            ref = module(*args)
            torch.testing.assert_close(module(*args), ref)
            ep = torch.export.export(module, args)
            torch.testing.assert_close(ep.module()(*args), ref)
            buf = io.BytesIO()
            torch.export.save(ep, buf)
            buf.seek(0)
            loaded = torch.export.load(buf)
            torch.testing.assert_close(loaded.module()(*args), ref)
            path = Path(tmp, f"{name}.pt2")
            torch.export.save(ep, path)
            torch.testing.assert_close(torch.export.load(path).module()(*args), ref)
            dec = ep.run_decompositions()
            torch.testing.assert_close(dec.module()(*args), ref)


if __name__ == "__main__":
    main()
