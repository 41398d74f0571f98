"""Standard vision models and a small transformer encoder, written in PyTorch for the ONNX tests.

torchvision's wheels for this torch are CUDA builds that don't import here, so these are the same architectures
written out (same layers, shapes and order as torchvision's resnet18, mobilenet_v3_small and efficientnet_b0), with
random weights and random batch-norm statistics (so no layer is an identity). `export(model, x)` gives ONNX bytes.
"""
from __future__ import annotations
import io
import torch
from torch import nn

def _bn_act(c: int, act: type[nn.Module] | None) -> list[nn.Module]:
  return [nn.BatchNorm2d(c)] + ([act()] if act is not None else [])

def _conv(cin: int, cout: int, k: int, s: int = 1, groups: int = 1,
          act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
  return nn.Sequential(nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False), *_bn_act(cout, act))

# ***** resnet18 *****

class BasicBlock(nn.Module):
  def __init__(self, cin: int, cout: int, stride: int):
    super().__init__()
    self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
    self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
    self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
      if stride != 1 or cin != cout else None
  def forward(self, x: torch.Tensor) -> torch.Tensor:
    out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
    return (out + (self.downsample(x) if self.downsample is not None else x)).relu()

class ResNet18(nn.Module):
  def __init__(self, num_classes: int = 1000):
    super().__init__()
    self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
    self.maxpool = nn.MaxPool2d(3, 2, 1)
    chans, layers, cin = [64, 128, 256, 512], [], 64
    for i, c in enumerate(chans):
      layers.append(nn.Sequential(BasicBlock(cin, c, 1 if i == 0 else 2), BasicBlock(c, c, 1)))
      cin = c
    self.layer1, self.layer2, self.layer3, self.layer4 = layers
    self.fc = nn.Linear(512, num_classes)
  def forward(self, x: torch.Tensor) -> torch.Tensor:
    x = self.maxpool(self.bn1(self.conv1(x)).relu())
    x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
    return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

# ***** mobilenet_v3_small *****

def _divisible(v: float, d: int = 8) -> int:
  new = max(d, int(v + d / 2) // d * d)
  return new + d if new < 0.9 * v else new

class SqueezeExcite(nn.Module):
  def __init__(self, c: int, squeeze: int, act: type[nn.Module], gate: type[nn.Module]):
    super().__init__()
    self.fc1, self.fc2, self.act, self.gate = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1), act(), gate()
  def forward(self, x: torch.Tensor) -> torch.Tensor:
    s = nn.functional.adaptive_avg_pool2d(x, 1)
    return x * self.gate(self.fc2(self.act(self.fc1(s))))

class InvertedResidual(nn.Module):
  def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, act: type[nn.Module], stride: int):
    super().__init__()
    layers: list[nn.Module] = []
    if exp != cin: layers.append(_conv(cin, exp, 1, act=act))
    layers.append(_conv(exp, exp, k, stride, groups=exp, act=act))
    if se: layers.append(SqueezeExcite(exp, _divisible(exp // 4), nn.ReLU, nn.Hardsigmoid))
    layers.append(_conv(exp, cout, 1, act=None))
    self.block, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout
  def forward(self, x: torch.Tensor) -> torch.Tensor: return x + self.block(x) if self.residual else self.block(x)

class MobileNetV3Small(nn.Module):
  # (kernel, expanded channels, out channels, squeeze-excite, activation, stride): torchvision's table
  CONFIG = [(3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
            (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
            (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
            (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1)]
  def __init__(self, num_classes: int = 1000):
    super().__init__()
    layers: list[nn.Module] = [_conv(3, 16, 3, 2, act=nn.Hardswish)]
    cin = 16
    for k, exp, cout, se, act, s in self.CONFIG:
      layers.append(InvertedResidual(cin, k, exp, cout, se, nn.ReLU if act == "RE" else nn.Hardswish, s))
      cin = cout
    layers.append(_conv(cin, 576, 1, act=nn.Hardswish))
    self.features = nn.Sequential(*layers)
    self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, num_classes))
  def forward(self, x: torch.Tensor) -> torch.Tensor:
    return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

# ***** efficientnet_b0 *****

class MBConv(nn.Module):
  def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int):
    super().__init__()
    exp = cin * expand
    layers: list[nn.Module] = []
    if exp != cin: layers.append(_conv(cin, exp, 1, act=nn.SiLU))
    layers += [_conv(exp, exp, k, stride, groups=exp, act=nn.SiLU),
               SqueezeExcite(exp, max(1, cin // 4), nn.SiLU, nn.Sigmoid), _conv(exp, cout, 1, act=None)]
    self.block, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout
  def forward(self, x: torch.Tensor) -> torch.Tensor: return x + self.block(x) if self.residual else self.block(x)

class EfficientNetB0(nn.Module):
  # (expand ratio, kernel, stride, in channels, out channels, layers): torchvision's b0 table
  CONFIG = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
            (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
  def __init__(self, num_classes: int = 1000):
    super().__init__()
    layers: list[nn.Module] = [_conv(3, 32, 3, 2, act=nn.SiLU)]
    for e, k, s, cin, cout, n in self.CONFIG:
      layers += [MBConv(cin if i == 0 else cout, cout, k, s if i == 0 else 1, e) for i in range(n)]
    layers.append(_conv(320, 1280, 1, act=nn.SiLU))
    self.features = nn.Sequential(*layers)
    self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))
  def forward(self, x: torch.Tensor) -> torch.Tensor:
    return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

# ***** a small transformer encoder *****

class TinyEncoder(nn.Module):
  def __init__(self, vocab: int = 100, d: int = 64, heads: int = 4, layers: int = 2, seq: int = 16):
    super().__init__()
    self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(1, seq, d) * 0.1)
    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
    self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    self.head = nn.Linear(d, vocab)
  def forward(self, ids: torch.Tensor) -> torch.Tensor: return self.head(self.encoder(self.tok(ids) + self.pos))

MODELS = {"resnet18": ResNet18, "mobilenet_v3_small": MobileNetV3Small, "efficientnet_b0": EfficientNetB0}

def make(name: str, seed: int = 0) -> nn.Module:
  """A model with random weights and random batch-norm statistics, in eval mode."""
  torch.manual_seed(seed)
  m = TinyEncoder() if name == "transformer" else MODELS[name]()
  for mod in m.modules():
    if isinstance(mod, nn.BatchNorm2d):
      mod.running_mean.uniform_(-0.1, 0.1)
      mod.running_var.uniform_(0.5, 1.5)
      nn.init.uniform_(mod.weight, 0.5, 1.5)
      nn.init.uniform_(mod.bias, -0.1, 0.1)
  return m.eval()

def example_input(name: str, batch: int = 1, size: int = 224) -> torch.Tensor:
  if name == "transformer": return torch.randint(0, 100, (batch, 16))
  return torch.randn(batch, 3, size, size)

def export(model: nn.Module, x: torch.Tensor, opset: int = 17) -> bytes:
  """The model as ONNX bytes, from torch.onnx.export (the TorchScript exporter: it needs no onnxscript)."""
  import warnings
  f = io.BytesIO()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(model, (x,), f, dynamo=False, opset_version=opset, input_names=["input"], output_names=["output"])
  return f.getvalue()
