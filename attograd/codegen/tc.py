"""Tensor-core planning: which axes of a matmul kernel become one warp's 16x8x16 tile (the TC action), and how a
tensor core reads its operands. The lowerer (lowerer._lower_tc) maps the tile onto the warp's lanes."""
from __future__ import annotations
from dataclasses import dataclass
from typing import TYPE_CHECKING
from attograd.dtype import DType, dtypes
from attograd.uop.ops import Ops, UOp
if TYPE_CHECKING: from attograd.codegen.kernel import Kernel, Opt

@dataclass(frozen=True)
class TensorCore:
  """Where a TC kernel's tile lives: output axes m (16 rows) and n (8 columns), reduce axis k (16), each the inner
  part of a split axis; the input dtype; swap: the MUL's second operand is the row-major A (m x k) tile."""
  m: int
  n: int
  k: int
  dtype: DType
  swap: bool
  dims = (16, 8, 16)
  def shifted(self, ax: int) -> TensorCore:
    """The same tile after axis `ax` was split in two."""
    m, n, k = (a + 1 if a > ax else a for a in (self.m, self.n, self.k))
    return TensorCore(m, n, k, self.dtype, self.swap)

def tc_operand(x: UOp) -> UOp:
  """A matmul operand as a tensor core reads it: Tensor.dot casts half/bfloat16 operands to float32 before multiplying
  (their products are exact there, and the sum accumulates in float32), which is what the tensor core does itself."""
  low = x.op is Ops.CAST and x.dtype is dtypes.float32 and x.src[0].dtype in (dtypes.float16, dtypes.bfloat16)
  return x.src[0] if low else x

def tc_input_dtype(mul: UOp) -> DType:
  """The dtype a tensor core would multiply in for this MUL: its operands' own (uncast) dtype when they agree."""
  a, b = (tc_operand(s).dtype for s in mul.src)
  return a if a is b else mul.dtype

def tc_plan(k: Kernel) -> TensorCore:
  """The axes a TC action would tile (before splitting them), or a ValueError saying why the kernel can't."""
  reduces = [u for u in k.ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD or reduces[0].src[0].op is not Ops.MUL:
    raise ValueError("TC: the kernel is not one sum of products")
  if k.first_reduce != k.shape_len - 1: raise ValueError(f"TC: needs one reduce axis, shape {k.full_shape}")
  mul = reduces[0].src[0]
  if (dt := tc_input_dtype(mul)) not in k.tensor_cores:
    raise ValueError(f"TC: no tensor cores for {dt} on this target (it has {list(k.tensor_cores)})")
  def strides(x: UOp, ax: int) -> list[int | None]:
    return [k.sts[u].index_strides()[ax] for u in x.toposort() if u.op is Ops.LOAD]
  (tm, tn, tk), kx = TensorCore.dims, k.shape_len - 1
  if k.full_shape[kx] % tk: raise ValueError(f"TC: reduce size {k.full_shape[kx]} is not a multiple of {tk}")
  for swap in (False, True):
    a, b = mul.src[::-1] if swap else mul.src
    sa = {ax: strides(a, ax) for ax in range(k.first_reduce)}
    sb = {ax: strides(b, ax) for ax in range(k.first_reduce)}
    # A varies along m and not n; B along n and not m; the innermost such axes that fit the tile
    ms = [ax for ax in range(k.first_reduce) if k.full_shape[ax] % tm == 0 and all(s == 0 for s in sb[ax])
          and any(s for s in sa[ax]) and None not in sa[ax]]
    ns = [ax for ax in range(k.first_reduce) if k.full_shape[ax] % tn == 0 and all(s == 0 for s in sa[ax])
          and any(s for s in sb[ax]) and None not in sb[ax]]
    if ms and ns: return TensorCore(ms[-1], ns[-1], kx, dt, swap)
  raise ValueError(f"TC: no output axes of shape {k.full_shape} fit {tm}x{tn} tiles of a matmul")


def apply_tc(k: Kernel, opt: Opt) -> None:
  """Split m, n and k so that their inner parts are one warp's 16x8x16 tile (the lowerer maps them onto lanes)."""
  if k.applied: raise ValueError(f"{opt}: TC must be the first action, not after {k.applied}")
  plan = tc_plan(k)
  sizes = dict(zip((plan.m, plan.n, plan.k), TensorCore.dims))
  inner: dict[int, int] = {}
  for ax in sorted(sizes, reverse=True):  # the highest axis first: lower axes keep their indices
    size, amt = k.full_shape[ax], sizes[ax]
    k.split_axis(ax, size // amt, amt)
    inner = {a + 1 if a > ax else a: v for a, v in inner.items()}
    inner[ax + 1] = ax
  by_orig = {v: a for a, v in inner.items()}
  k.tc = TensorCore(by_orig[plan.m], by_orig[plan.n], by_orig[plan.k], plan.dtype, plan.swap)
