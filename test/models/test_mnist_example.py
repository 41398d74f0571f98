"""The MNIST example trains on the real IDX files to at least 98% test accuracy (the training issue's bar)."""
from __future__ import annotations
import os, re, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MNIST = os.getenv("MNIST_DIR") or os.path.join(os.path.dirname(ROOT), "shared", "datasets", "mnist")

@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(os.path.join(MNIST, "train-images-idx3-ubyte.gz")),
                    reason=f"no MNIST files in {MNIST}")
def test_beautiful_mnist_reaches_98_percent() -> None:
  env = {**os.environ, "PYTHONPATH": ROOT, "MNIST_DIR": MNIST, "STEPS": "100", "BS": "512", "DEV": "CPU"}
  r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "beautiful_mnist.py")], capture_output=True,
                     text=True, env=env, timeout=1800)
  assert r.returncode == 0, r.stderr[-3000:]
  losses = [float(v) for v in re.search(r"losses (.*)", r.stdout).group(1).split()]  # type: ignore[union-attr]
  acc = float(re.search(r"test accuracy ([\d.]+)%", r.stdout).group(1))  # type: ignore[union-attr]
  assert len(losses) == 100 and sum(losses[-10:]) / 10 < losses[0] / 5, losses
  assert acc >= 98.0, r.stdout

@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(os.path.join(MNIST, "train-images-idx3-ubyte.gz")),
                    reason=f"no MNIST files in {MNIST}")
def test_tinygrad_style_training_code_path(monkeypatch: pytest.MonkeyPatch) -> None:
  """The API calls of tinygrad 0.14's beautiful_mnist (its code is not copied here): a @function model call, a
  @TinyJit @Context(TRAINING=1) step sampling its batch with Tensor.randint, loss.realize(*opt.schedule_step()),
  a jitted accuracy and trange, for a few steps on a slice of the real data."""
  from attograd import Context, GlobalCounters, Tensor, TinyJit, function, nn
  from attograd.helpers import trange
  monkeypatch.setenv("MNIST_DIR", MNIST)
  X_train, Y_train, X_test, Y_test = nn.datasets.mnist()
  # a slice: a sampled batch is gathered with a one-hot reduction over the rows, slow over all 60000
  X_train, Y_train, X_test, Y_test = X_train[:2048], Y_train[:2048], X_test[:1000], Y_test[:1000]
  class Model:
    def __init__(self) -> None:
      self.layers = [nn.Conv2d(1, 8, 5), Tensor.relu, nn.BatchNorm(8), Tensor.max_pool2d, lambda x: x.flatten(1),
                     nn.Linear(8 * 12 * 12, 10)]
    @function
    def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.layers)
  Tensor.manual_seed(0)
  model = Model()
  opt = nn.optim.Adam(nn.state.get_parameters(model))
  @TinyJit
  @Context(TRAINING=1)
  def train_step() -> Tensor:
    opt.zero_grad()
    samples = Tensor.randint(128, high=X_train.shape[0])
    loss = model(X_train[samples]).sparse_categorical_crossentropy(Y_train[samples]).backward()
    return loss.realize(*opt.schedule_step())
  @TinyJit
  def test_acc() -> Tensor: return (model(X_test).argmax(axis=1) == Y_test).mean() * 100
  losses = []
  for _ in (t := trange(30)):
    GlobalCounters.reset()
    losses.append(train_step().item())
    t.set_description(f"loss {losses[-1]:.2f}")
  assert sum(losses[-5:]) / 5 < losses[0] / 2, losses
  assert test_acc().item() > 80
