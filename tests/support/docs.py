"""Screenshots copied into docs/.
(Moved from tests/browser/test_manage_directory.py, which imports it from here.)"""

import os
import shutil
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def _docs_copy(path: Path, name: str) -> None:
    if os.environ.get("GAVEL_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS / name)
