"""Data-parallel training over attograd.distributed: the same parameters on every rank (broadcast from rank 0 at the
start), each rank a different slice of every batch, gradients averaged over the ranks in buckets before each step."""
from __future__ import annotations
from typing import Sequence
import attograd.distributed.world as dist
from attograd.tensor import Tensor

DEFAULT_BUCKET_MB = 25.0  # as PyTorch's DDP: few enough collectives, early enough start for the first ones

def _buckets(ts: Sequence[Tensor], bucket_bytes: int) -> list[list[int]]:
  """Indices of `ts` grouped in order into runs of one device and dtype, each up to bucket_bytes (or one tensor)."""
  out: list[list[int]] = []
  size = 0
  for i, t in enumerate(ts):
    same_kind = bool(out) and (ts[out[-1][0]].device, ts[out[-1][0]].dtype) == (t.device, t.dtype)
    if same_kind and size + t.nbytes() <= bucket_bytes:
      out[-1].append(i)
      size += t.nbytes()
    else:
      out.append([i])
      size = t.nbytes()
  return out

def _flat(ts: list[Tensor]) -> Tensor:
  return ts[0].flatten() if len(ts) == 1 else ts[0].flatten().cat(*[t.flatten() for t in ts[1:]])

def _split(flat: Tensor, like: list[Tensor]) -> list[Tensor]:
  out, off = [], 0
  for t in like:
    n = t.numel()
    out.append(flat[off:off + n].reshape(t.shape))
    off += n
  return out

def broadcast_parameters(params: Sequence[Tensor], root: int = 0, bucket_mb: float = DEFAULT_BUCKET_MB) -> None:
  """Write rank `root`'s values into `params` on every rank (call once after building the model: each rank's random
  initialization differs otherwise)."""
  params = list(params)
  for idx in _buckets(params, int(bucket_mb * 2**20)):
    group = [params[i] for i in idx]
    got = dist.broadcast(_flat(group), root)
    for p, v in zip(group, _split(got, group)): p.assign(v)

def allreduce_gradients(params: Sequence[Tensor], bucket_mb: float = DEFAULT_BUCKET_MB) -> None:
  """Replace each parameter's .grad by its mean over the ranks. Gradients are packed into buckets of about bucket_mb,
  last parameters first (the order backward produces them); all buckets are computed in one schedule, then each
  bucket's transfer starts as soon as its bytes are on the host and runs while the next ones are copied out."""
  params = [p for p in params if p.grad is not None]
  if not params: return
  params.reverse()
  grads = [p.grad for p in params]  # type: ignore[misc]
  groups = [[grads[i] for i in idx] for idx in _buckets(grads, int(bucket_mb * 2**20))]  # type: ignore[arg-type]
  flats = [_flat(g) for g in groups]  # type: ignore[arg-type]
  Tensor.realize(*flats)
  reduced = dist.world().all_reduce_many(flats, "mean")
  at = 0
  for g, r in zip(groups, reduced):
    for p, v in zip(params[at:at + len(g)], _split(r, g)): p.grad = v  # type: ignore[arg-type]
    at += len(g)
