"""Real models through OnnxRunner: resnet18, mobilenet_v3_small and efficientnet_b0 (random weights) and a small
transformer encoder, exported by torch.onnx.export and checked against onnxruntime; TinyJit over a runner call."""
from __future__ import annotations
import pytest

torch = pytest.importorskip("torch", reason="the model tests export models with torch.onnx")
ort = pytest.importorskip("onnxruntime", reason="the model tests compare with onnxruntime (pip install onnxruntime)")
np = pytest.importorskip("numpy")
import onnx_models as om  # noqa: E402
from attograd import Tensor, TinyJit  # noqa: E402
from attograd.nn.onnx import OnnxRunner  # noqa: E402

def _reference(raw: bytes, x: np.ndarray) -> np.ndarray:
  return ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]

@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "efficientnet_b0", "transformer"])
def test_model_matches_onnxruntime(name):
  x = om.example_input(name)
  raw = om.export(om.make(name), x)
  want = _reference(raw, x.numpy())
  got = OnnxRunner(raw)({"input": x.numpy()})["output"].numpy()
  assert got.shape == want.shape and got.dtype == want.dtype
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)

@pytest.mark.parametrize("prune", [False, True])
def test_tinyjit_over_runner(prune: bool):
  # prune=True: the kernels that read only the weights run once, at capture; the replays give the same numbers
  name = "mobilenet_v3_small"
  raw = om.export(om.make(name), om.example_input(name, size=64))
  runner = OnnxRunner(raw)
  step = TinyJit(lambda x: runner({"input": x})["output"].realize(), prune=prune)
  for i in range(4):
    x = om.example_input(name, size=64)
    got = step(Tensor(x.numpy())).numpy()
    np.testing.assert_allclose(got, _reference(raw, x.numpy()), atol=1e-4, rtol=1e-4, err_msg=f"call {i}")
