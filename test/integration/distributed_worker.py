"""The program test_distributed.py launches under `mpirun -n 2`: one scenario per run, named by argv[1]; results go to
the file named by argv[2] (rank 0 writes it)."""
from __future__ import annotations
import os, sys, time
import numpy as np
from attograd import Tensor, dtypes, nn
from attograd import distributed as dist
from attograd.distributed import DistributedSampler
from attograd.nn.data import DataLoader

STEPS, BATCH = 3, 16  # BATCH rows per step in all, split between the ranks

def make_data() -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(0)
  return rng.standard_normal((STEPS * BATCH, 8)).astype(np.float32), rng.integers(0, 4, STEPS * BATCH).astype(np.int32)

def train(rank: int, world: int, seed: int) -> list[np.ndarray]:
  """STEPS Adam steps of a small MLP on BATCH rows a step; with world > 1 each rank takes its share of each batch."""
  Tensor.manual_seed(seed)
  model = [nn.Linear(8, 16), Tensor.relu, nn.Linear(16, 4)]
  params = nn.state.get_parameters(model)
  if world > 1: dist.broadcast_parameters(params)
  opt = nn.optim.Adam(params, lr=0.01)
  X, Y = make_data()
  for step in range(STEPS):
    xs, ys = X[step * BATCH:(step + 1) * BATCH], Y[step * BATCH:(step + 1) * BATCH]
    sampler = DistributedSampler(BATCH, rank, world, shuffle=False)
    xb, yb = next(iter(DataLoader(xs, ys, batch_size=BATCH, sampler=sampler)))
    with Tensor.train():
      opt.zero_grad()
      xb.sequential(model).sparse_categorical_crossentropy(yb).backward()
      if world > 1: dist.allreduce_gradients(params, bucket_mb=0.001)  # tiny buckets: several collectives per step
      opt.step()
  return [p.numpy() for p in params]

def main() -> None:
  mode, out = sys.argv[1], sys.argv[2]
  dist.init()  # the timeout comes from $DIST_TIMEOUT
  r, n = dist.rank(), dist.world_size()
  res: dict[str, np.ndarray] = {}
  if mode == "collectives":
    for dt in ("float32", "float64", "float16", "int32", "int8", "uint8", "bool"):
      x = np.random.default_rng(r).integers(-3 if dt not in ("uint8", "bool") else 0, 4, (3, 5)).astype(dt)
      t = Tensor(x)
      for op in ("sum", "max", "min") + (("mean",) if dt.startswith("float") else ()):
        res[f"{dt}_{op}"] = dist.all_reduce(t, op).numpy()
      res[f"{dt}_bcast"] = dist.broadcast(t, root=n - 1).numpy()
      res[f"{dt}_gather"] = dist.all_gather(t).numpy()
      res[f"{dt}_in"] = dist.all_gather(t).numpy()  # every rank's input, to check against
    dist.barrier()
  elif mode == "train": res = {str(i): p for i, p in enumerate(train(r, n, seed=r))}  # rank 1 starts from other weights
  elif mode == "mismatch": dist.all_reduce(Tensor.ones(4 + r))
  elif mode == "dtype_mismatch": dist.all_reduce(Tensor.ones(4, dtype=dtypes.float32 if r == 0 else dtypes.int32))
  elif mode in ("kill", "exit", "hang", "raise"):
    dist.all_reduce(Tensor.ones(4))
    if r == 1:
      if mode == "kill": os.kill(os.getpid(), 9)
      if mode == "exit": os._exit(3)
      if mode == "hang": time.sleep(3600)
      if mode == "raise": raise ValueError("rank 1 fails on purpose")
    st = time.monotonic()
    try: dist.all_reduce(Tensor.ones(4))
    except dist.DistributedError as e:
      with open(out, "w") as f: f.write(f"{time.monotonic() - st:.2f} {e}")
      raise
  if r == 0: np.savez(out, **res)

if __name__ == "__main__": main()
