"""verl's import-time notices (no accelerator, no Megatron/torchtitan/... engine) are silenced by our commands that
import verl, and only those: what the walkthrough, the evaluation and the MEI server import after their arguments
are checked prints nothing on stderr, while another warning still shows."""

from __future__ import annotations

import subprocess
import sys

IMPORTED_AFTER_THE_CHECKS = (  # the walkthrough's, eval run's, eval verl's and the MEI server's heavy imports
    "verl_ext.walkthrough.questions", "verl_ext.walkthrough.pipeline", "verl_ext.walkthrough.report",
    "verl_ext.eval.episode", "verl_ext.eval.run", "verl_ext.eval.report", "verl_ext.eval.verl_val",
    "verl_ext.rollout.hf_generate", "verl.workers.engine",
)


def test_only_verls_import_notices_are_silenced():
    probe = ("from verl_ext.notices import quiet_verl_import_notices\n"
             "quiet_verl_import_notices()\n"
             f"import {', '.join(IMPORTED_AFTER_THE_CHECKS)}\n"
             "import warnings\n"
             "warnings.warn('any other warning still shows')\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stderr == "<string>:5: UserWarning: any other warning still shows\n", done.stderr
