"""The code's shape, checked wherever the tests run (CI runs only pytest): ruff with the configured rules (pyflakes,
120 columns, the style rules pyproject.toml picks) on the package, tests, benchmarks and examples, and mypy on the
package. Both come with the test extra; without them these tests skip and say so."""
from __future__ import annotations
import importlib.util, os, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _run(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)

@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install -e '.[test]')")
def test_ruff() -> None:
  r = _run("ruff", "check", "--no-cache", "attograd", "test", "bench", "examples")
  assert r.returncode == 0, f"ruff check found problems:\n{r.stdout[-6000:]}{r.stderr[-2000:]}"

@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install -e '.[test]')")
def test_mypy(tmp_path) -> None:
  # its own cache dir: concurrent test workers (or a stale cache from another version) don't share one
  r = _run("mypy", "--cache-dir", str(tmp_path / "mypy"), "attograd")
  assert r.returncode == 0, f"mypy found problems:\n{r.stdout[-6000:]}{r.stderr[-2000:]}"
