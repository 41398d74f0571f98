"""The MNIST example trains on the real IDX files to at least 98% test accuracy (the training issue's bar)."""
from __future__ import annotations
import os, re, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MNIST = os.path.join(os.path.dirname(ROOT), "shared", "datasets", "mnist")

@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(os.path.join(MNIST, "train-images-idx3-ubyte.gz")), reason=f"no MNIST files in {MNIST}")
def test_beautiful_mnist_reaches_98_percent() -> None:
  env = {**os.environ, "PYTHONPATH": ROOT, "MNIST_DIR": MNIST, "STEPS": "100", "BS": "512", "DEV": "CPU"}
  r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "beautiful_mnist.py")], capture_output=True, text=True,
                     env=env, timeout=1800)
  assert r.returncode == 0, r.stderr[-3000:]
  losses = [float(v) for v in re.search(r"losses (.*)", r.stdout).group(1).split()]  # type: ignore[union-attr]
  acc = float(re.search(r"test accuracy ([\d.]+)%", r.stdout).group(1))  # type: ignore[union-attr]
  assert len(losses) == 100 and sum(losses[-10:]) / 10 < losses[0] / 5, losses
  assert acc >= 98.0, r.stdout
