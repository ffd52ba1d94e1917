"""The server does not depend on its clients: importing every tool_server module loads no verl, ray, verl_ext or
data_gen."""

import json
import subprocess
import sys

CODE = """
import json, pkgutil, importlib, sys
import tool_server
for mod in pkgutil.walk_packages(tool_server.__path__, "tool_server."):
    if mod.name != "tool_server.__main__":  # importing __main__ would start the CLI
        importlib.import_module(mod.name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {"verl", "ray", "verl_ext", "data_gen"})))
"""


def test_tool_server_imports_no_verl_ray_verl_ext_or_data_gen():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
