"""Equal graphs share nodes (hash-consing); buffers written in place must not leak into other tensors."""
from __future__ import annotations
from attograd import Tensor

def test_equal_contiguous_copies_are_separate(device: str) -> None:
  a, b = Tensor.zeros(3).contiguous(), Tensor.zeros(3).contiguous()
  a.realize(), b.realize()
  a.assign(Tensor([1.0, 2.0, 3.0]))
  assert b.tolist() == [0.0, 0.0, 0.0]
  assert Tensor.zeros(3).contiguous().realize().tolist() == [0.0, 0.0, 0.0]

def test_memoized_result_not_reused_after_in_place_write(device: str) -> None:
  x = Tensor([1.0, 2.0]).realize()
  y = (x * 2).contiguous().realize()
  y.assign(Tensor([7.0, 7.0]))
  assert (x * 2).tolist() == [2.0, 4.0]

def test_scalar_leaf_gradient_is_its_own(device: str) -> None:
  x = Tensor(3.0, requires_grad=True)
  (x * 3.0).backward()
  assert x.grad is not None and x.grad.item() == 3.0

def test_creation_functions_keep_requires_grad(device: str) -> None:
  for t in (Tensor.zeros(3, requires_grad=True), Tensor.ones(2, 2, requires_grad=True),
            Tensor.rand(3, requires_grad=True), Tensor.full((2,), 4.0, requires_grad=True),
            Tensor.eye(2, requires_grad=True)):
    assert t.requires_grad is True

def test_deep_unary_chain_has_a_shape(device: str) -> None:
  x = Tensor([1.0])
  for _ in range(10000): x = x.neg()
  assert x.shape == (1,)
