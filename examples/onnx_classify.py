"""Export an image classifier from PyTorch to ONNX, run it with attograd's OnnxRunner and with onnxruntime, and print
both top-5 predictions and the speed of each.

  python examples/onnx_classify.py [--model resnet18|mobilenet_v3_small|efficientnet_b0]

torchvision is used when it imports; otherwise the same architecture from test/onnx_models.py (random weights either
way: nothing is downloaded, so the classes are arbitrary and only the agreement between the two runtimes matters).
"""
from __future__ import annotations
import argparse, os, sys, time
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import onnx_models as om  # noqa: E402
from attograd import Tensor, TinyJit  # noqa: E402
from attograd.nn.onnx import OnnxRunner  # noqa: E402

def build(name: str) -> torch.nn.Module:
  try:
    import torchvision
    return getattr(torchvision.models, name)().eval()
  except Exception:  # torchvision missing, or a build that doesn't match this torch
    return om.make(name)

def timed(fn, runs: int = 5) -> tuple[object, float]:
  fn()
  st = time.perf_counter()
  for _ in range(runs): out = fn()
  return out, (time.perf_counter() - st) / runs * 1e3

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", default="resnet18", choices=sorted(om.MODELS))
  args = ap.parse_args()
  torch.manual_seed(0)
  x = torch.rand(1, 3, 224, 224)
  raw = om.export(build(args.model), x)
  print(f"{args.model}: {len(raw) / 1e6:.1f} MB of ONNX")

  runner = OnnxRunner(raw)
  # prune: the kernels that read only the weights (layout copies of conv weights, folded constants) run once, at capture
  step = TinyJit(lambda t: runner({"input": t})["output"].realize(), prune=True)
  xt = Tensor(x.numpy()).realize()
  step(xt)  # the first two calls build and capture the kernels
  ours, ours_ms = timed(lambda: step(xt).numpy())

  try:
    import onnxruntime as ort
    sess = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
    theirs, theirs_ms = timed(lambda: sess.run(None, {"input": x.numpy()})[0])
  except ImportError:
    theirs, theirs_ms = None, None
    print("onnxruntime is not installed (pip install onnxruntime): attograd only")

  def top5(logits) -> list[tuple[int, float]]:
    p = np.exp(logits[0] - logits[0].max())
    p /= p.sum()
    return [(int(i), float(p[i])) for i in np.argsort(-p)[:5]]

  print(f"{'':>4}{'attograd':>22}{'onnxruntime':>22}")
  for k, a in enumerate(top5(ours)):
    b = top5(theirs)[k] if theirs is not None else None
    print(f"{k + 1:>4}{f'class {a[0]} {a[1]:.4f}':>22}{(f'class {b[0]} {b[1]:.4f}' if b else '-'):>22}")
  print(f"latency{ours_ms:>19.1f} ms" + (f"{theirs_ms:>19.1f} ms" if theirs_ms is not None else ""))
  if theirs is not None: print(f"max |difference| of the logits: {np.abs(ours - theirs).max():.2e}")

if __name__ == "__main__": main()
