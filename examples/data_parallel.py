"""Train the MNIST CNN of beautiful_mnist.py data-parallel: every rank holds the whole model and takes its share of
each batch; gradients are averaged over the ranks before every Adam step, so all ranks keep the same weights.

  mpirun -n 2 python examples/data_parallel.py      # STEPS=100 BS=512 (the global batch) as beautiful_mnist.py
  STEPS=3 mpirun -n 2 python examples/data_parallel.py   # a short smoke run
  (as root, Open MPI wants: mpirun --allow-run-as-root --oversubscribe -n 2 ...)
"""
from __future__ import annotations
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attograd import Tensor, getenv, nn
from attograd import distributed as dist
from attograd.distributed import DistributedSampler
from attograd.nn.data import DataLoader, normalize_mnist
from beautiful_mnist import Model, test_accuracy

def main() -> float:
  dist.init()
  rank, world = dist.rank(), dist.world_size()
  steps, bs = getenv("STEPS", 100), getenv("BS", 512)
  if bs % world: raise SystemExit(f"BS={bs} must split evenly between the {world} ranks")
  X_train, Y_train, X_test, Y_test = nn.datasets.mnist()
  Tensor.manual_seed(getenv("SEED", 42) + rank)  # different on purpose: the broadcast below makes them rank 0's
  model = Model()
  params = nn.state.get_parameters(model)
  dist.broadcast_parameters(params)
  opt = nn.optim.Adam(params)
  # every rank shuffles the same way (same seed) and takes every world-th row: its part of each global batch
  sampler = DistributedSampler(X_train.shape[0], rank, world, shuffle=True, seed=getenv("SEED", 42), drop_last=True)
  loader = DataLoader(X_train, Y_train, batch_size=bs // world, drop_last=True, sampler=sampler)
  batches = iter(loader)
  st = time.perf_counter()
  losses: list[float] = []
  for i in range(steps):
    try: xb, yb = next(batches)
    except StopIteration:
      batches = iter(loader)
      xb, yb = next(batches)
    with Tensor.train():
      opt.zero_grad()
      loss = model(normalize_mnist(xb)).sparse_categorical_crossentropy(yb.cast("int32")).backward()
      dist.allreduce_gradients(params)
      # the loss printed is the mean over the whole global batch, as in the one-process example
      loss_value = dist.all_reduce(loss.detach(), "mean").item()
      opt.step()
    losses.append(loss_value)
    if rank == 0:
      print(f"\rstep {i + 1:4d}/{steps} loss {loss_value:6.3f}  {(time.perf_counter() - st) / (i + 1):5.2f} s/step",
            end="", file=sys.stderr, flush=True)
  if rank == 0: print(file=sys.stderr)
  n_test = getenv("TEST_SIZE", X_test.shape[0])
  acc = test_accuracy(model, X_test[:n_test], Y_test[:n_test])
  if rank == 0:
    print(f"losses {' '.join(f'{v:.3f}' for v in losses)}")
    print(f"test accuracy {acc:.2f}% after {steps} steps of {bs} on {world} ranks ({time.perf_counter() - st:.1f} s)")
  return acc

if __name__ == "__main__":
  acc = main()
  if (want := float(os.getenv("TARGET", "0"))) and acc < want:
    sys.exit(f"test accuracy {acc:.2f}% is below the target {want}%")
