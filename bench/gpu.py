"""`python -m bench --only gpu` (or `python -m bench.gpu` alone): attograd on a CUDA GPU next to PyTorch on the same
GPU, in one run: half and bfloat16 matmul 4096 (PyTorch calls cuBLAS), the device's copy bandwidth (PyTorch's
device-to-device copy is the reference), the MNIST CNN training step and GPT-2-shaped decode. Without a CUDA device
seen by both attograd and PyTorch the group is skipped, with the reason."""
from __future__ import annotations
import argparse, contextlib, os, sys
from typing import Any, Callable, Iterator
from bench.run import Unavailable, median_time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def _require_gpu() -> Any:
  """torch, after checking that torch and attograd both reach a CUDA device; Unavailable says which doesn't."""
  try: import torch
  except ImportError: raise Unavailable("needs PyTorch with CUDA (the reference on the same GPU)") from None
  if not torch.cuda.is_available(): raise Unavailable(f"torch {torch.__version__} sees no CUDA device")
  from attograd import Device
  try: Device["CUDA"]
  except Exception as e: raise Unavailable(f"attograd's CUDA device is unavailable: {e}") from None
  return torch

@contextlib.contextmanager
def _on_cuda() -> Iterator[None]:
  """attograd's and torch's default device set to the GPU: models built inside put their tensors there."""
  import torch
  from attograd import Device
  old = Device.DEFAULT
  Device.DEFAULT = "CUDA"
  try:
    with torch.device("cuda"): yield
  finally: Device.DEFAULT = old

def _timed(fn: Callable[[], Any], sync: Callable[[], Any]) -> float:
  return median_time(lambda: (fn(), sync()))

def matmul_rows(n: int) -> list[dict[str, Any]]:
  """(n, n) @ (n, n) in half and bfloat16 (float32 accumulation in both), TFLOPS; each result checked once against
  torch's before timing."""
  import numpy as np
  torch = _require_gpu()
  from attograd import Device, Tensor, dtypes
  rows = []
  rng = np.random.default_rng(11)
  an, bn = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  for name, adt, tdt in (("half", dtypes.half, torch.float16), ("bfloat16", dtypes.bfloat16, torch.bfloat16)):
    row: dict[str, Any] = {"name": f"CUDA matmul {n} {name}", "unit": "TFLOPS", "work": 2.0 * n**3, "values": {}}
    ta, tb = torch.from_numpy(an).to("cuda", tdt), torch.from_numpy(bn).to("cuda", tdt)
    want = (ta @ tb).float().cpu().numpy()
    a, b = Tensor(an, device="CUDA").cast(adt).realize(), Tensor(bn, device="CUDA").cast(adt).realize()
    got = (a @ b).float().numpy()
    # both round the same products to 8 (half: 11) bits at the end: compare relative to the output's scale
    if not np.allclose(got, want, rtol=2e-2, atol=2e-2 * float(np.abs(want).max())):
      raise AssertionError(f"CUDA matmul {n} {name}: attograd differs from torch by {np.abs(got - want).max():.3g}")
    dev = Device["CUDA"]
    row["values"]["attograd"] = 2.0 * n**3 / _timed(lambda: (a @ b).realize(), dev.synchronize) / 1e12
    row["values"]["torch"] = 2.0 * n**3 / _timed(lambda: ta @ tb, torch.cuda.synchronize) / 1e12
    rows.append(row)
  return rows

def copy_rows(nbytes: int) -> list[dict[str, Any]]:
  """Device memory bandwidth, bytes read + written per second: attograd's elementwise kernel `x * 2` (one read, one
  write per element) next to torch's device-to-device copy, the device's own copy engine path."""
  import numpy as np
  torch = _require_gpu()
  from attograd import Device, Tensor
  n = nbytes // 4
  x = Tensor(np.ones(n, np.float32), device="CUDA").realize()
  if (got := float((x * 2).sum().item())) != 2.0 * n: raise AssertionError(f"CUDA x * 2: sum {got}, want {2.0 * n}")
  src, dst = torch.ones(n, device="cuda"), torch.empty(n, device="cuda")
  row = {"name": f"CUDA copy {nbytes >> 20} MiB", "unit": "GB/s", "work": 2.0 * nbytes, "values": {
    "attograd": 2.0 * nbytes / _timed(lambda: (x * 2).realize(), Device["CUDA"].synchronize) / 1e9,
    "torch": 2.0 * nbytes / _timed(lambda: dst.copy_(src), torch.cuda.synchronize) / 1e9}}
  return [row]

def mnist_rows(batch: int) -> list[dict[str, Any]]:
  """The MNIST CNN training step of `python -m bench --only mnist`, both frameworks on the GPU."""
  torch = _require_gpu()
  from attograd import Device
  from bench.run import make_mnist
  with _on_cuda():
    bench = make_mnist(batch)
    row = bench.rows[0]
    fns = {fw: bench.setups[fw]() for fw in ("attograd", "torch")}
    sync = {"attograd": Device["CUDA"].synchronize, "torch": torch.cuda.synchronize}
    values = {fw: 1.0 / _timed(fns[fw][row.name], sync[fw]) for fw in fns}
  return [{"name": f"CUDA {row.name}", "unit": "steps/s", "work": 1.0, "values": values}]

def decode_rows(quick: bool, verbose: bool) -> list[dict[str, Any]]:
  """Prefill and decode tok/s of the GPT-2-shaped llama (random weights), both frameworks on the GPU."""
  _require_gpu()
  from bench.llm import bench_model, gpt2_shaped
  n, rounds, prompt = (8, 2, 32) if quick else (32, 3, 128)
  with _on_cuda():
    rows = bench_model("CUDA gpt2-small-shaped", gpt2_shaped, prompt, n, 512, ["attograd", "torch"], rounds, verbose)
  return rows

def rows(quick: bool = False, verbose: bool = False) -> list[dict[str, Any]]:
  """The rows `python -m bench` prints; Unavailable (no GPU) skips the group."""
  _require_gpu()
  n, nbytes, batch = (1024, 64 << 20, 64) if quick else (4096, 1 << 30, 512)
  return matmul_rows(n) + copy_rows(nbytes) + mnist_rows(batch) + decode_rows(quick, verbose)

def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__)
  parser.add_argument("--quick", action="store_true", help="smaller sizes, for a fast smoke run")
  args = parser.parse_args(argv)
  sys.path.insert(0, ROOT)
  try: got = rows(args.quick, verbose=True)
  except Unavailable as e:
    print(f"bench.gpu: skipped: {e}")
    return 0
  for r in got:
    cells = "  ".join(f"{fw} {v:.3g}" if isinstance(v, float) else f"{fw} {v}" for fw, v in r["values"].items())
    print(f"{r['name']:<44}{r['unit']:>8}  {cells}")
  return 0

if __name__ == "__main__": raise SystemExit(main())
