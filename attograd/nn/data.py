"""Batching: a DataLoader over (X, Y) arrays that yields Tensor batches, shuffled reproducibly from a seed, or in the
order a sampler gives (attograd.distributed's DistributedSampler gives each rank of a job its own share)."""
from __future__ import annotations
import random
from typing import Any, Iterable, Iterator
from attograd.device import Device
from attograd.dtype import DType, from_np_dtype
from attograd.helpers import prod
from attograd.tensor import Tensor

def normalize_mnist(x: Tensor) -> Tensor:
  """MNIST pixels 0..255 -> float32 with the training set's mean 0.1307 and std 0.3081 taken out.

  >>> round(normalize_mnist(Tensor([0, 255], dtype="uint8")).tolist()[1], 4)
  2.8215
  """
  return (x.float() / 255.0 - 0.1307) / 0.3081

class _HostRows:
  """An array's bytes on the host, split into rows along dim 0, so a batch of any rows is one bytes join."""
  def __init__(self, data: Any, what: str):
    if isinstance(data, Tensor):
      self.shape, self.dtype = tuple(data.shape), data.dtype
      mv = data.data()
      self.raw = mv.cast("B") if mv.ndim > 1 or mv.format != "B" else mv
    elif type(data).__module__ == "numpy" or hasattr(data, "__array_interface__"):
      import numpy as np
      arr = np.ascontiguousarray(data)
      self.shape, self.dtype = tuple(arr.shape), from_np_dtype(arr.dtype)
      self.raw = arr.reshape(-1).view(np.uint8).data if arr.size else memoryview(b"")
    else: raise TypeError(f"DataLoader: {what} must be a Tensor or a NumPy array, got {type(data).__name__}")
    if not self.shape: raise ValueError(f"DataLoader: {what} must have a batch dim, got a 0-d array")
    self.row = prod(self.shape[1:]) * self.dtype.itemsize
  def gather(self, idx: list[int], device: str) -> Tensor:
    r = self.row
    raw = b"".join(self.raw[i * r:(i + 1) * r] for i in idx)
    return _tensor(raw, (len(idx),) + self.shape[1:], self.dtype, device)

def _tensor(raw: bytes, shape: tuple[int, ...], dtype: DType, device: str) -> Tensor:
  # a batch arrives as bytes of any dtype: Tensor(bytes, dtype) reads them as that dtype, like torch.frombuffer
  return Tensor(raw, dtype=dtype, device=device).reshape(shape)

class DataLoader:
  """Iterate over (xb, yb) batches of `batch_size` rows of X and Y (Tensors or NumPy arrays with the same length).

  shuffle=True draws a new order each epoch (each `for` over the loader) from a `random.Random(seed)`, so a seed makes
  the whole run reproducible. drop_last=True skips a last, smaller batch. A `sampler` (an iterable of row indices, new
  each epoch, such as attograd.distributed.DistributedSampler) chooses the rows and their order instead. Batches are
  gathered on the host (a row copy, not a one-hot gather over the whole dataset) and land on `device` (default:
  Device.DEFAULT); without shuffling or a sampler, Tensors already on `device` are cut into batches with shrink
  instead.

  >>> dl = DataLoader(Tensor([[0], [1], [2], [3], [4]]), Tensor([0, 1, 2, 3, 4]), batch_size=2, shuffle=False)
  >>> [yb.tolist() for _, yb in dl]
  [[0, 1], [2, 3], [4]]
  """
  def __init__(self, X: Any, Y: Any, batch_size: int, shuffle: bool = True, seed: int | None = None,
               drop_last: bool = False, device: str | None = None, sampler: Iterable[int] | None = None):
    if not isinstance(batch_size, int) or batch_size < 1:
      raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
    self.device = Device.canonicalize(device)
    # in order, Tensors already on the device are cut into batches with shrink (no copy); else rows are gathered on
    # the host: a gather by index Tensor is a one-hot reduction over the whole dataset, far too slow for a batch
    views = not shuffle and sampler is None and \
      all(isinstance(a, Tensor) and a.device == self.device and a.ndim > 0 for a in (X, Y))
    self.X: Tensor | _HostRows = X if views else _HostRows(X, "X")
    self.Y: Tensor | _HostRows = Y if views else _HostRows(Y, "Y")
    if self.X.shape[0] != self.Y.shape[0]:
      raise ValueError(f"DataLoader: X and Y need the same length, got X {tuple(self.X.shape)} "
                       f"and Y {tuple(self.Y.shape)}")
    self.n, self.batch_size, self.shuffle, self.drop_last = self.X.shape[0], batch_size, shuffle, drop_last
    self.rng, self.sampler = random.Random(seed), sampler
  def __len__(self) -> int:
    n = len(self.sampler) if self.sampler is not None else self.n  # type: ignore[arg-type]
    return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
  def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
    if self.sampler is not None: order = list(self.sampler)
    else:
      order = list(range(self.n))
      if self.shuffle: self.rng.shuffle(order)
    if (bad := next((i for i in order if not 0 <= i < self.n), None)) is not None:
      raise IndexError(f"DataLoader: the sampler gave row {bad}, outside the {self.n} rows of X and Y")
    n_batches = len(order) // self.batch_size if self.drop_last else -(-len(order) // self.batch_size)
    for b in range(n_batches):
      lo, hi = b * self.batch_size, min((b + 1) * self.batch_size, len(order))
      yield self._batch(self.X, order, lo, hi), self._batch(self.Y, order, lo, hi)
  def _batch(self, a: Tensor | _HostRows, order: list[int], lo: int, hi: int) -> Tensor:
    if isinstance(a, Tensor): return a.shrink(((lo, hi),) + (None,) * (a.ndim - 1))
    return a.gather(order[lo:hi], self.device)
