"""The wheel ships the adapters under tracescore.integrations and works from a fresh venv."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_imports_the_langchain_adapter(tmp_path: Path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
         str(ROOT)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    [wheel] = dist.glob("tracescore-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tracescore/integrations/langchain/__init__.py" in names
    assert "tracescore/integrations/llama_index/__init__.py" in names
    assert "tracescore/stats/ppi.py" in names
    assert "tracescore/examples/data/corpus.json" in names
    assert not any(n.startswith(("integrations/", "examples/", "tests/")) for n in names)

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    # Dependencies come from this interpreter's site-packages (no network needed), but
    # tracescore itself must come from the fresh venv, not from the editable checkout.
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    code = (
        "import tracescore, tracescore.integrations.langchain as lc, tracescore.examples.langchain_rag as ex;"
        "print(tracescore.__file__); print(lc.__file__);"
        "ts = tracescore.init(db='w.db', metrics=['token_f1']);"
        "ans = ex.build_chain().invoke('How heavy is the Trail?', config={'callbacks': [ts.langchain_handler()]});"
        "print(ts.flush(20)); ts.shutdown()"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[0].startswith(str(env_dir)) and lines[1].startswith(str(env_dir))
    assert lines[1].endswith("tracescore/integrations/langchain/__init__.py")
    assert lines[2] == "True"
