"""Neural-network functions on Tensor (activations, convolution, pooling, losses, attention), built from primitives."""
from __future__ import annotations

class NNMixin:
  pass
