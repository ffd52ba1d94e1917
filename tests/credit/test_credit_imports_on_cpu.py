"""verl_ext.credit stays framework-free: importing it loads neither verl nor torch."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_credit_package_imports_without_verl_or_torch():
    code = (
        "import sys, verl_ext.credit; "
        "loaded = [m for m in ('verl', 'torch') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
