"""nn layers: forward and backward vs torch.nn with the same weights, BatchNorm's running statistics, the default
initialisation, and argument errors."""
from __future__ import annotations
import importlib.util
from typing import Any
import numpy as np
import pytest
import attograd.nn as nn
from attograd import Tensor, dtypes

torch = pytest.importorskip("torch")

def copy_weights(ours: Any, ref: Any) -> None:
  """Give `ours` the values of every tensor in torch module `ref`'s state dict, by name."""
  for name, v in ref.state_dict().items(): setattr(ours, name, Tensor(v.detach().numpy()))

def randomize(ref: Any, seed: int = 0) -> Any:
  """`ref` with random parameters (norm layers start at ones and zeros, which would hide a swapped weight and bias)."""
  torch.manual_seed(seed)
  with torch.no_grad():
    for p in ref.parameters(): p.uniform_(-1, 1)
  return ref

def as_tuple(out: Any) -> tuple[Any, ...]: return out if isinstance(out, tuple) else (out,)

def compare_layer(ours: Any, ref: Any, x: np.ndarray, atol: float = 1e-5, backward: bool = True) -> None:
  """Forward, and backward of a weighted sum of the outputs, of an attograd layer vs a torch module of equal weights."""
  copy_weights(ours, ref)
  float_in = x.dtype.kind == "f"
  tx = torch.tensor(x, requires_grad=float_in)
  ax = Tensor(x, requires_grad=True if float_in else None)
  touts, aouts = as_tuple(ref(tx)), as_tuple(ours(ax))
  assert len(touts) == len(aouts)
  for t, a in zip(touts, aouts):
    assert a.shape == tuple(t.shape)
    np.testing.assert_allclose(a.numpy(), t.detach().numpy(), atol=atol, rtol=1e-5)
  if not backward or not hasattr(Tensor, "backward"): return
  rng = np.random.default_rng(1)
  ws = [rng.uniform(-1, 1, tuple(t.shape)).astype(np.float32) for t in touts]
  sum(((t * torch.tensor(w)).sum() for t, w in zip(touts, ws)), torch.tensor(0.0)).backward()
  params = {name: getattr(ours, name) for name, _ in ref.named_parameters()}
  for p in params.values(): p.requires_grad = True
  aouts = as_tuple(ours(ax))  # again, now that the weights require grad
  loss = aouts[0].mul(Tensor(ws[0])).sum()
  for a, w in zip(aouts[1:], ws[1:]): loss = loss + a.mul(Tensor(w)).sum()
  loss.backward()
  if float_in:
    assert ax.grad is not None
    np.testing.assert_allclose(ax.grad.numpy(), tx.grad.numpy(), atol=atol, rtol=1e-4)
  for name, tp in ref.named_parameters():
    g = params[name].grad
    assert g is not None, f"no gradient for {name}"
    np.testing.assert_allclose(g.numpy(), tp.grad.numpy(), atol=atol * 10, rtol=1e-4, err_msg=name)

def rand(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)

TOKENS = np.array([[1, 2, 9], [0, 2, 2]], dtype=np.int64)
UPSAMPLE = {"stride": 2, "padding": 1, "output_padding": 1}

# one line per case: attograd layer, torch.nn layer, their arguments, and the input's shape (or the input)
CASES: dict[str, tuple[str, str, tuple[Any, ...], dict[str, Any], Any]] = {
  "linear": ("Linear", "Linear", (4, 3), {}, (2, 4)),
  "linear_3d_nobias": ("Linear", "Linear", (4, 3), {"bias": False}, (2, 5, 4)),
  "conv1d": ("Conv1d", "Conv1d", (2, 4, 3), {"stride": 2, "padding": 1}, (2, 2, 9)),
  "conv1d_groups_dilation": ("Conv1d", "Conv1d", (4, 2, 3), {"dilation": 2, "groups": 2}, (1, 4, 9)),
  "conv2d": ("Conv2d", "Conv2d", (3, 4, 3), {}, (2, 3, 5, 5)),
  "conv2d_stride_pad": ("Conv2d", "Conv2d", (3, 4, 3), {"stride": 2, "padding": 1}, (1, 3, 5, 5)),
  "conv2d_same_dilation": ("Conv2d", "Conv2d", (2, 3, (2, 3)), {"padding": "same", "dilation": 2}, (1, 2, 6, 7)),
  "conv2d_groups_nobias": ("Conv2d", "Conv2d", (4, 6, (3, 2)), {"padding": (1, 0), "groups": 2, "bias": False},
                           (1, 4, 5, 5)),
  "conv_transpose1d": ("ConvTranspose1d", "ConvTranspose1d", (2, 3, 3), UPSAMPLE, (2, 2, 5)),
  "conv_transpose2d": ("ConvTranspose2d", "ConvTranspose2d", (3, 2, 3), UPSAMPLE, (1, 3, 4, 4)),
  "conv_transpose2d_groups": ("ConvTranspose2d", "ConvTranspose2d", (4, 6, 2), {"groups": 2, "dilation": 2},
                              (1, 4, 3, 3)),
  "layernorm": ("LayerNorm", "LayerNorm", (5,), {}, (2, 3, 5)),
  "layernorm_2dims": ("LayerNorm", "LayerNorm", ((3, 5),), {}, (2, 3, 5)),
  "layernorm_noaffine": ("LayerNorm", "LayerNorm", (5,), {"elementwise_affine": False}, (4, 5)),
  "groupnorm": ("GroupNorm", "GroupNorm", (2, 4), {}, (2, 4, 3, 3)),
  "groupnorm_noaffine": ("GroupNorm", "GroupNorm", (3, 6), {"affine": False}, (2, 6, 5)),
  "instancenorm2d": ("InstanceNorm", "InstanceNorm2d", (3,), {"affine": True}, (2, 3, 4, 4)),
  "instancenorm1d": ("InstanceNorm", "InstanceNorm1d", (3,), {"affine": True}, (2, 3, 6)),
  "rmsnorm": ("RMSNorm", "RMSNorm", (5,), {"eps": 1e-6}, (2, 3, 5)),
  "embedding": ("Embedding", "Embedding", (10, 4), {}, TOKENS),
  "lstmcell": ("LSTMCell", "LSTMCell", (3, 5), {}, (2, 3)),
  "lstmcell_nobias": ("LSTMCell", "LSTMCell", (3, 2), {"bias": False}, (4, 3)),
}

@pytest.mark.parametrize("case", list(CASES))
def test_layer_vs_torch(device: str, case: str) -> None:
  ours, ref, args, kwargs, x = CASES[case]
  compare_layer(getattr(nn, ours)(*args, **kwargs), randomize(getattr(torch.nn, ref)(*args, **kwargs)),
                x if isinstance(x, np.ndarray) else rand(*x))

def test_layernorm2d_vs_torch(device: str) -> None:
  ref, ours, x = randomize(torch.nn.LayerNorm(3)), nn.LayerNorm2d(3), rand(2, 3, 4, 5)
  copy_weights(ours, ref)
  want = ref(torch.tensor(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2).detach().numpy()
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), want, atol=1e-5)

def test_lstmcell_with_state_vs_torch(device: str) -> None:
  ref, ours = torch.nn.LSTMCell(3, 4), nn.LSTMCell(3, 4)
  copy_weights(ours, ref)
  x, h, c = rand(2, 3), rand(2, 4, seed=1), rand(2, 4, seed=2)
  th, tc = ref(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
  ah, ac = ours(Tensor(x), (Tensor(h), Tensor(c)))
  np.testing.assert_allclose(ah.numpy(), th.detach().numpy(), atol=1e-5)
  np.testing.assert_allclose(ac.numpy(), tc.detach().numpy(), atol=1e-5)

# ***** BatchNorm: batch statistics in training, running statistics in eval *****

@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 4)], ids=["1d", "1d_seq", "2d"])
def test_batchnorm_train_then_eval_vs_torch(device: str, shape: tuple[int, ...]) -> None:
  torch_bn = torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d
  ref, ours = randomize(torch_bn(3, momentum=0.2)), nn.BatchNorm(3, momentum=0.2)
  copy_weights(ours, ref)
  ref.train()
  with Tensor.train():
    for i in range(2):
      x = rand(*shape, seed=i)
      np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), atol=1e-5)
  np.testing.assert_allclose(ours.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-6)
  np.testing.assert_allclose(ours.running_var.numpy(), ref.running_var.numpy(), atol=1e-6)
  assert ours.num_batches_tracked.item() == 2 and ours.num_batches_tracked.shape == ()
  ref.eval()
  x = rand(*shape, seed=5)
  # Tensor.training is off again: the running statistics
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), atol=1e-5)
  assert ours.num_batches_tracked.item() == 2

def test_batchnorm_running_stats_are_one_schedule(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # a training call writes its three running statistics in one realize: they were three assigns, a schedule each,
  # whose few small kernels each waited for a compiler run of their own on a first run (MNIST: 10 -> 6 schedules)
  import attograd.tensor.core as core
  bn, x = nn.BatchNorm(3, momentum=0.5), Tensor(rand(4, 3, 2, 2, seed=3)).realize()
  bn.running_mean.realize(), bn.running_var.realize(), bn.num_batches_tracked.realize()
  schedules: list[int] = []
  run = core.run_schedule
  monkeypatch.setattr(core, "run_schedule", lambda items: (schedules.append(len(items)), run(items))[1])
  with Tensor.train(): out = bn(x)
  assert len(schedules) == 1, schedules
  monkeypatch.undo()
  xv = x.numpy()
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.5 * xv.mean((0, 2, 3)), atol=1e-6)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.5 + 0.5 * xv.var((0, 2, 3), ddof=1), atol=1e-5)
  assert bn.num_batches_tracked.item() == 1
  out.numpy()  # the forward after the writes: its batch statistics, unaffected

def test_batchnorm2d_train_backward_vs_torch(device: str) -> None:
  ref = randomize(torch.nn.BatchNorm2d(3))
  ref.train()
  with Tensor.train(): compare_layer(nn.BatchNorm2d(3), ref, rand(2, 3, 3, 3))

def test_batchnorm_eval_vs_torch(device: str) -> None:
  ref = randomize(torch.nn.BatchNorm2d(3))
  with torch.no_grad(): ref.running_mean.uniform_(-1, 1), ref.running_var.uniform_(0.5, 2)
  ref.eval()
  compare_layer(nn.BatchNorm2d(3), ref, rand(2, 3, 3, 3))

def test_batchnorm_without_running_stats(device: str) -> None:
  ref = randomize(torch.nn.BatchNorm2d(3, track_running_stats=False))
  ref.eval()  # without running statistics, eval still uses the batch's
  ours = nn.BatchNorm2d(3, track_running_stats=False)
  assert not hasattr(ours, "running_mean")
  compare_layer(ours, ref, rand(2, 3, 3, 3))

def test_batchnorm_state_is_not_trained(device: str) -> None:
  bn = nn.BatchNorm(3)
  assert bn.running_mean.requires_grad is False and bn.running_var.requires_grad is False
  assert bn.num_batches_tracked.requires_grad is False and bn.num_batches_tracked.dtype.name == "int64"
  assert bn.running_mean.tolist() == [0.0] * 3 and bn.running_var.tolist() == [1.0] * 3
  assert nn.BatchNorm1d is nn.BatchNorm2d is nn.BatchNorm3d is nn.BatchNorm

# ***** initialisation *****

def check_uniform(t: Tensor, bound: float) -> None:
  v = t.numpy()
  assert v.min() >= -bound and v.max() <= bound
  assert abs(v.mean()) < bound * 0.1
  assert v.std() == pytest.approx(bound / np.sqrt(3), rel=0.1)

def test_init_linear(device: str) -> None:
  layer = nn.Linear(64, 48)
  assert layer.weight.shape == (48, 64) and layer.bias is not None and layer.bias.shape == (48,)
  check_uniform(layer.weight, 1 / 8)
  assert np.abs(layer.bias.numpy()).max() <= 1 / 8
  assert not np.allclose(nn.Linear(64, 48).weight.numpy(), layer.weight.numpy())  # a new draw per layer

def test_init_conv(device: str) -> None:
  conv = nn.Conv2d(8, 16, 3, groups=2)  # fan_in = 8/2 * 3 * 3
  assert conv.weight.shape == (16, 4, 3, 3)
  check_uniform(conv.weight, 1 / 6)
  convt = nn.ConvTranspose2d(8, 16, 3, groups=2)  # PyTorch takes fan_in from weight.shape[1]: 16/2 * 3 * 3
  assert convt.weight.shape == (8, 8, 3, 3)
  check_uniform(convt.weight, 1 / np.sqrt(72))
  assert nn.Conv1d(3, 5, 4).weight.shape == (5, 3, 4) and nn.ConvTranspose1d(3, 5, 4).weight.shape == (3, 5, 4)

def test_init_embedding_and_lstm(device: str) -> None:
  w = nn.Embedding(64, 64).weight.numpy()
  assert abs(w.mean()) < 0.05 and w.std() == pytest.approx(1.0, rel=0.05)
  cell = nn.LSTMCell(8, 16)
  assert cell.weight_ih.shape == (64, 8) and cell.weight_hh.shape == (64, 16)
  check_uniform(cell.weight_hh, 1 / 4)
  assert cell.bias_ih is not None and np.abs(cell.bias_ih.numpy()).max() <= 1 / 4

def test_init_norms(device: str) -> None:
  for layer in (nn.LayerNorm((2, 3)), nn.GroupNorm(2, 4), nn.InstanceNorm(4), nn.BatchNorm(4), nn.RMSNorm(4)):
    assert layer.weight is not None and (layer.weight.numpy() == 1).all()
    if hasattr(layer, "bias"): assert layer.bias is not None and (layer.bias.numpy() == 0).all()
  assert nn.LayerNorm(3, elementwise_affine=False).weight is None and nn.BatchNorm(3, affine=False).bias is None

def test_equal_layers_have_separate_weights(device: str) -> None:
  # Tensor.ones(3) twice would be one node: two layers would share one weight for autograd and in memory
  a, b = nn.LayerNorm(3), nn.LayerNorm(3)
  x = Tensor(rand(2, 3))
  for p in (a.weight, b.weight): p.requires_grad = True  # type: ignore[union-attr]
  (a(x).sum() + b(x).mul(x).sum()).backward()
  assert a.weight is not None and b.weight is not None and a.weight.grad is not None and b.weight.grad is not None
  assert not np.allclose(a.weight.grad.numpy(), b.weight.grad.numpy())

# ***** errors and the module *****

def test_layer_errors(device: str) -> None:
  with pytest.raises(ValueError, match="strided"): nn.Conv2d(2, 2, 3, stride=2, padding="same")
  with pytest.raises(ValueError, match="padding"): nn.Conv2d(2, 2, 3, padding="full")
  with pytest.raises(ValueError, match="groups"): nn.Conv2d(3, 4, 3, groups=2)
  with pytest.raises(ValueError, match="kernel_size"): nn.Conv1d(2, 2, (3, 3))
  with pytest.raises(ValueError, match="divisible"): nn.GroupNorm(3, 4)
  with pytest.raises(ValueError, match="normalized_shape"): nn.LayerNorm(4)(Tensor.ones(2, 3))
  with pytest.raises(ValueError, match=r"\(N, 4, \.\.\.\)"): nn.GroupNorm(2, 4)(Tensor.ones(2, 3, 3))
  with pytest.raises(ValueError, match=r"\(N, C, \.\.\.\)"): nn.BatchNorm(3)(Tensor.ones(3))
  with pytest.raises(TypeError, match="integer"): nn.Embedding(4, 2)(Tensor([1.0]))

def test_module_namespace() -> None:
  assert nn.optim.SGD is not None and nn.optim.Adam is not None
  for sub in ("state", "datasets"):
    if importlib.util.find_spec(f"attograd.nn.{sub}") is None: continue
    assert getattr(nn, sub).__name__ == f"attograd.nn.{sub}"
  with pytest.raises(AttributeError, match="no attribute 'nope'"): nn.nope  # noqa: B018

# ***** a layer given to dot / matmul (a convenience beyond tinygrad) *****

def test_dot_applies_a_layer(device: str) -> None:
  Tensor.manual_seed(3)
  # the seeds' example 3 at a smaller size (784 -> 128 -> 10 there: 100k weights drawn on the PYTHON device took 45 s)
  l1, l2 = nn.Linear(48, 16), nn.Linear(16, 10)
  x = Tensor.rand(4, 3, 4, 4)
  got = x.flatten(1).dot(l1).relu().dot(l2)
  want = l2(l1(x.flatten(1)).relu())
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(x.flatten(1).matmul(l1).numpy(), l1(x.flatten(1)).numpy(), rtol=1e-5, atol=1e-6)
  assert x.flatten(1).dot(l1, dtype=dtypes.float16).dtype is dtypes.float16
  with pytest.raises(TypeError, match="matmul: expected a Tensor or a layer with a .weight"): x.dot(nn.BatchNorm)
  with pytest.raises(TypeError, match="got list"): x.dot([1, 2])

def test_layer_parameters_get_grads_without_an_optimizer() -> None:
  # parameters are made with requires_grad=True, as PyTorch's modules: backward fills their .grad before any
  # optimizer exists (it left them None: an optimizer was what turned requires_grad on); running stats stay False
  lin, conv, bn, emb = nn.Linear(3, 2), nn.Conv2d(1, 2, 3), nn.BatchNorm(2), nn.Embedding(5, 3)
  with Tensor.train():
    loss = bn(conv(Tensor.ones(2, 1, 5, 5))).sum() + lin(Tensor.ones(4, 3)).sum() + emb(Tensor([1, 2])).sum()
    loss.backward()
  for p in (lin.weight, lin.bias, conv.weight, conv.bias, bn.weight, bn.bias, emb.weight):
    assert p.requires_grad is True and p.grad is not None and p.grad.shape == p.shape
  assert bn.running_mean.requires_grad is False and bn.running_mean.grad is None
