"""`python -m bench --only onnx` (or `python -m bench.onnx` alone): ONNX inference latency, attograd's OnnxRunner
(under TinyJit) next to onnxruntime with its default threads and with 1 thread, in one run: resnet18 (random
weights, 224x224) at batch 1 and batch 16."""
from __future__ import annotations
import argparse, os, statistics, sys, time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def _median_ms(fn: Callable[[], Any], warmup: int = 2, runs: int = 5, budget_s: float = 20.0) -> float:
  for _ in range(warmup): fn()
  times: list[float] = []
  start = time.perf_counter()
  while len(times) < runs or (time.perf_counter() - start < 1.0 and len(times) < 50):
    st = time.perf_counter()
    fn()
    times.append(time.perf_counter() - st)
    if time.perf_counter() - start > budget_s and len(times) >= 3: break
  return statistics.median(times) * 1e3

def run(batches: tuple[int, ...] = (1, 16), size: int = 224) -> list[tuple[str, dict[str, float]]]:
  import numpy as np
  import onnxruntime as ort
  sys.path.insert(0, os.path.join(ROOT, "test"))
  import onnx_models as om
  from attograd import Tensor, TinyJit
  from attograd.nn.onnx import OnnxRunner
  rows = []
  model = om.make("resnet18")
  for b in batches:
    x = om.example_input("resnet18", batch=b, size=size)
    raw = om.export(model, x)
    xn = x.numpy()
    figures: dict[str, float] = {}
    runner = OnnxRunner(raw)
    # prune: kernels that read only the weights (conv weight layouts, folded constants) run once, at capture
    step = TinyJit(lambda t: runner({"input": t})["output"].realize(), prune=True)
    xt = Tensor(xn).realize()
    got = step(xt).numpy()
    for threads, label in ((0, "onnxruntime"), (1, "onnxruntime 1 thread")):
      opts = ort.SessionOptions()
      if threads: opts.intra_op_num_threads = threads
      sess = ort.InferenceSession(raw, opts, providers=["CPUExecutionProvider"])
      want = sess.run(None, {"input": xn})[0]
      figures[label] = _median_ms(lambda: sess.run(None, {"input": xn}))
    # a fast wrong answer is no result: the check runs once, outside the timing
    if not np.allclose(got, want, atol=1e-3, rtol=1e-3):
      raise AssertionError(f"resnet18 batch {b}: attograd differs from onnxruntime")
    figures["attograd"] = _median_ms(lambda: step(xt).numpy())
    rows.append((f"resnet18 batch {b} latency", figures))
  return rows

def rows(quick: bool = False) -> list[dict[str, Any]]:
  """The rows `python -m bench` prints (unit ms, lower is better; onnxruntime's two settings are the peers)."""
  for mod, extra in (("onnxruntime", "onnx"), ("torch", "test")):  # torch exports the model
    try: __import__(mod)
    except ImportError as e: raise ModuleNotFoundError(f"needs {mod}: pip install -e '.[{extra}]'") from e
  return [{"name": name, "unit": "ms", "work": 0.0, "values": figs} for name, figs in run((1,) if quick else (1, 16))]

def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m bench.onnx", description=__doc__)
  parser.add_argument("--batches", default="1,16", help="comma-separated batch sizes (default: %(default)s)")
  args = parser.parse_args(argv)
  from attograd import Device
  print(f"attograd device {Device.DEFAULT}, {os.cpu_count()} cpus")
  rows = run(tuple(int(b) for b in args.batches.split(",")))
  cols = ["attograd", "onnxruntime", "onnxruntime 1 thread"]
  print(f"{'benchmark (ms, lower is better)':<34}" + "".join(f"{c:>22}" for c in cols))
  for name, figs in rows: print(f"{name:<34}" + "".join(f"{figs[c]:>22.1f}" for c in cols))
  return 0

if __name__ == "__main__": raise SystemExit(main())
