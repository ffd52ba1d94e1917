"""verl_ext.credit stays framework-free: importing it loads neither verl nor torch."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_credit_package_imports_without_verl_or_torch():
    code = (
        "import sys, verl_ext.credit, verl_ext.credit.judge, verl_ext.credit.references, verl_ext.credit.fallbacks, "
        "verl_ext.credit.group, verl_ext.credit.prompt, verl_ext.credit.offline_judge; "
        "loaded = [m for m in ('verl', 'torch') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
