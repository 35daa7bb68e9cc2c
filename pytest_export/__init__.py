"""pytest-export: export every marked case with torch.export once and check the program every way.

Importing this package does not import torch.
"""

from .api import check
from .options import STAGES, ExportWarning, UsageError
from .results import CaseResult, ExportCheckFailure, StageResult

__version__ = "0.1.0"
__all__ = ["check", "CaseResult", "StageResult", "ExportCheckFailure", "UsageError", "ExportWarning", "STAGES", "__version__"]
