"""Train the classic MNIST CNN: two 5x5 and two 3x3 conv blocks with BatchNorm and max-pooling, a Linear head, Adam.

  python examples/beautiful_mnist.py            # STEPS=100 BS=512 by default; MNIST_DIR points at the IDX .gz files
"""
from __future__ import annotations
import os, sys, time
from attograd import Tensor, getenv, nn
from attograd.nn.data import DataLoader, normalize_mnist

class Model:
  def __init__(self) -> None:
    self.layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32),
                   Tensor.max_pool2d,
                   nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64),
                   Tensor.max_pool2d,
                   lambda x: x.flatten(1), nn.Linear(576, 10)]
  def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.layers)

def test_accuracy(model: Model, X: Tensor, Y: Tensor, bs: int = 1000) -> float:
  correct = 0
  for i in range(0, X.shape[0], bs):
    xb, yb = X[i:i + bs], Y[i:i + bs]
    correct += int((model(normalize_mnist(xb)).argmax(axis=1) == yb.cast("int32")).sum().item())
  return 100.0 * correct / X.shape[0]

def main() -> float:
  steps, bs = getenv("STEPS", 100), getenv("BS", 512)
  X_train, Y_train, X_test, Y_test = nn.datasets.mnist()
  Tensor.manual_seed(getenv("SEED", 42))
  model = Model()
  opt = nn.optim.Adam(nn.state.get_parameters(model))
  loader = DataLoader(X_train, Y_train, batch_size=bs, shuffle=True, seed=getenv("SEED", 42), drop_last=True)
  batches = iter(loader)
  st = time.perf_counter()
  first_step = 0.0
  losses: list[float] = []
  for i in range(steps):
    try: xb, yb = next(batches)
    except StopIteration:
      batches = iter(loader)
      xb, yb = next(batches)
    with Tensor.train():
      opt.zero_grad()
      loss = model(normalize_mnist(xb)).sparse_categorical_crossentropy(yb.cast("int32")).backward()
      loss_value = loss.item()  # read before the step: the step changes the weights the lazy loss reads
      opt.step()
    if i == 0: first_step = time.perf_counter() - st
    losses.append(loss_value)
    done = i + 1
    bar = "#" * (30 * done // steps)
    print(f"\rstep {done:4d}/{steps} [{bar:<30}] loss {loss_value:6.3f}  "
          f"{(time.perf_counter() - st) / done:5.2f} s/step",
          end="", file=sys.stderr, flush=True)
  print(file=sys.stderr)
  n_test = getenv("TEST_SIZE", X_test.shape[0])
  acc = test_accuracy(model, X_test[:n_test], Y_test[:n_test])
  print(f"losses {' '.join(f'{v:.3f}' for v in losses)}")
  print(f"test accuracy {acc:.2f}% after {steps} steps of {bs} ({time.perf_counter() - st:.1f} s, "
        f"first step {first_step:.1f} s)")
  return acc

if __name__ == "__main__":
  acc = main()
  if (want := float(os.getenv("TARGET", "0"))) and acc < want:
    sys.exit(f"test accuracy {acc:.2f}% is below the target {want}%")
