"""The documentation site builds with `mkdocs build --strict`: every page and API entry resolves, and every
```python run``` block of the tutorials and the deep dive executes (the hook in docs/_hooks runs them)."""
from __future__ import annotations
import os, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def test_mkdocs_build_strict(tmp_path) -> None:
  pytest.importorskip("mkdocs", reason="the docs extra (mkdocs, mkdocs-material, mkdocstrings) is not installed")
  pytest.importorskip("material", reason="mkdocs-material is not installed")
  pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed")
  env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DEV": "CPU"}
  r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")], cwd=ROOT,
                     env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  deep = (tmp_path / "site" / "deep-dive" / "index.html").read_text()
  assert "void r_" in deep and "optimizations:" in deep and "DEFINE_GLOBAL" in deep  # the stages' real output
  assert "RMSNorm" in (tmp_path / "site" / "api" / "index.html").read_text()
