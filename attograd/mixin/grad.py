"""Autograd on Tensor: backward(), gradient(), requires_grad and the train() switch."""
from __future__ import annotations

class GradMixin:
  pass
