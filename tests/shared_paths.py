"""Where the shared acceptance cases and data live (beside the repository)."""

import os
from pathlib import Path

SHARED = Path(os.environ.get("SPASEQ_SHARED", Path(__file__).resolve().parents[2] / "shared"))
ACCEPTANCE = SHARED / "acceptance"
CASES = ACCEPTANCE / "cases"
DATA = SHARED / "data"
