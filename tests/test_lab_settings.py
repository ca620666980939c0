"""`make lab` opens a clean JupyterLab: the first lab is not covered by the "Jupyter
news?" prompt, through default setting overrides shipped in ``jupyter/labconfig``."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "@jupyterlab/apputils-extension:notification"


def test_make_lab_uses_the_shipped_overrides():
    makefile = (ROOT / "Makefile").read_text()
    assert "JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter $(BIN)/jupyter lab" in makefile


def test_jupyterlab_reads_news_and_update_checks_off():
    probe = ("from jupyterlab_server.settings_utils import _get_overrides; import json; "
             "print(json.dumps(_get_overrides('/nonexistent')[0]))")
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, check=True).stdout
    settings = json.loads(out)[PLUGIN]
    assert settings == {"fetchNews": "false", "checkForUpdates": False}


def test_the_overridden_settings_exist_in_jupyterlabs_schema():
    schema_dir = Path(sys.prefix) / "share/jupyter/lab/schemas/@jupyterlab/apputils-extension"
    schema = json.loads((schema_dir / "notification.json").read_text())["properties"]
    assert {"const": "false", "title": "Never"} in schema["fetchNews"]["oneOf"]
    assert schema["checkForUpdates"]["type"] == "boolean"
