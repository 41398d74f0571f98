"""Scaling out: MNIST CNN training steps/s on 2 ranks x 1 thread against 1 rank x 1 thread (same batch per rank, so
ideal scaling doubles the images/s), and the all-reduce bandwidth of a 64 MB float32 tensor across 2 ranks against
this machine's memory copy bandwidth.

  python -m bench --only distributed   # needs mpirun and mpi4py (pip install -e '.[distributed]')
  python -m bench.distributed          # the same figures, printed alone
"""
from __future__ import annotations
import os, shutil, subprocess, sys, time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH, STEPS, WARMUP, MB = 128, 10, 3, 64

def _mnist_steps_per_s() -> float:
  import numpy as np
  from attograd import Tensor, nn
  from attograd import distributed as dist
  sys.path.insert(0, os.path.join(ROOT, "examples"))
  from beautiful_mnist import Model
  dist.init()
  rng = np.random.default_rng(dist.rank())
  x = Tensor(rng.standard_normal((BATCH, 1, 28, 28), dtype=np.float32))
  y = Tensor(rng.integers(0, 10, BATCH).astype(np.int32))
  model = Model()
  params = nn.state.get_parameters(model)
  dist.broadcast_parameters(params)
  opt = nn.optim.Adam(params)
  def step() -> None:
    with Tensor.train():
      opt.zero_grad()
      model(x).sparse_categorical_crossentropy(y).backward()
      if dist.world_size() > 1: dist.allreduce_gradients(params)
      opt.step()
    params[0].numpy()
  for _ in range(WARMUP): step()
  dist.barrier()
  st = time.perf_counter()
  for _ in range(STEPS): step()
  return STEPS / (time.perf_counter() - st)

def _allreduce_seconds() -> float:
  from attograd import Tensor
  from attograd import distributed as dist
  dist.init()
  t = Tensor.ones(MB * 2**20 // 4).contiguous().realize()
  dist.all_reduce(t).realize()
  best = float("inf")
  for _ in range(5):
    dist.barrier()
    st = time.perf_counter()
    dist.all_reduce(t).realize()
    best = min(best, time.perf_counter() - st)
  return best

def _copy_gbs() -> float:
  import numpy as np
  a = np.ones(MB * 2**20, dtype=np.uint8)
  b = np.empty_like(a)
  best = float("inf")
  for _ in range(5):
    st = time.perf_counter()
    np.copyto(b, a)
    best = min(best, time.perf_counter() - st)
  return MB * 2**20 / best / 1e9

def _launch(ranks: int, what: str) -> float:
  mpirun = shutil.which("mpirun")
  if mpirun is None: raise SystemExit("bench.distributed needs mpirun: pip install -e '.[distributed]'")
  root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
  env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
  out = subprocess.run([mpirun, *root, "--oversubscribe", "-n", str(ranks), sys.executable, "-m", "bench.distributed",
                        "--worker", what], capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
  if out.returncode != 0: raise RuntimeError(out.stderr[-2000:])
  return float(out.stdout.strip().splitlines()[-1])

def rows(quick: bool = False) -> list[dict[str, Any]]:
  """The rows `python -m bench` prints: steps/s of 1 and 2 ranks (the scaling efficiency is their ratio, each rank
  running a full batch) and the 64 MB all-reduce's algorithm bandwidth (GB/s: its vs-limit column is the share of
  the copy bandwidth measured in the same run)."""
  if shutil.which("mpirun") is None: raise ModuleNotFoundError("needs mpirun: pip install -e '.[distributed]'")
  try: import mpi4py  # noqa: F401
  except ImportError as e: raise ModuleNotFoundError("needs mpi4py: pip install -e '.[distributed]'") from e
  one, two = _launch(1, "mnist"), _launch(2, "mnist")
  sec = _launch(2, "allreduce")
  return [{"name": f"MNIST train b{BATCH}/rank, 1 rank x 1 thr", "unit": "steps/s", "work": 0.0,
           "values": {"attograd": one}},
          {"name": f"MNIST train b{BATCH}/rank, 2 ranks x 1 thr", "unit": "steps/s", "work": 0.0,
           "values": {"attograd": two}},
          {"name": "  2-rank scaling efficiency", "unit": "%", "work": 0.0, "values": {"attograd": 100 * two / one}},
          {"name": f"all_reduce {MB} MB float32, 2 ranks", "unit": "GB/s", "work": 0.0,
           "values": {"attograd": MB * 2**20 / sec / 1e9}}]

def main() -> None:
  print(f"{'benchmark':<46}{'figure':>16}  ({os.cpu_count()} cpus)")
  for r in rows(): print(f"{r['name']:<46}{r['values']['attograd']:>8.2f} {r['unit']}")
  print(f"{'memory copy bandwidth (numpy copyto, 64 MB)':<46}{_copy_gbs():>8.2f} GB/s")

if __name__ == "__main__":
  if len(sys.argv) > 2 and sys.argv[1] == "--worker":
    val = _mnist_steps_per_s() if sys.argv[2] == "mnist" else _allreduce_seconds()
    from attograd import distributed as dist
    if dist.rank() == 0: print(val)
  else: main()
