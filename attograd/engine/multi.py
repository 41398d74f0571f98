"""Tensors over several devices: a MULTI node holds one shard per device (split along `axis`, or whole copies when
axis is None). Graphs are built over the logical (whole) shapes; before scheduling, pm_multi rewrites them into
per-device graphs joined by copies, and a reduce across the sharded axis into an all-reduce (direct or ring by size)."""
from __future__ import annotations
from attograd.dtype import dtypes
from attograd.helpers import prod
from attograd.uop import ops as uop_ops
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite

RING_MIN_ELEMENTS = 1 << 16  # an all-reduce this big or bigger goes around a ring: each device moves 2(n-1)/n of it

# set once the process makes its first multi-device node: until then no graph needs the pm_multi pass
active = [False]

def split_sizes(n: int, k: int) -> list[int]:
  """n rows over k devices: ceil(n/k) each, the last ones smaller (uneven shards, as tinygrad's shard splits)."""
  sz = -(-n // k)
  return [max(0, min(sz, n - sz * i)) for i in range(k)]


def multi(srcs: list[UOp], axis: int | None) -> UOp:
  active[0] = True
  return UOp(Ops.MULTI, srcs[0].dtype, tuple(srcs), axis)

def _whole(u: UOp) -> UOp:
  """u as a whole buffer a COPY can read (a buffer seen through reshapes is one already)."""
  x = u
  while x.op is Ops.RESHAPE: x = x.src[0]
  return u if x.op is Ops.BUFFER else UOp(Ops.CONTIGUOUS, u.dtype, (u,))

def to_device(u: UOp, device: str) -> UOp:
  if u.device == device: return u
  # a constant seen through movement ops (Tensor.ones, full) is made again on the device: nothing to compute or copy
  if (c := u.base).op is Ops.CONST and c.src: return u.substitute({c.src[0]: UOp(Ops.DEVICE, arg=device)})
  return UOp(Ops.COPY, u.dtype, (_whole(u), UOp(Ops.DEVICE, arg=device)))

def _shrink(u: UOp, axis: int, lo: int, hi: int) -> UOp:
  if (lo, hi) == (0, u.shape[axis]): return u
  return UOp(Ops.SHRINK, u.dtype, (u,), tuple((lo, hi) if i == axis else (0, s) for i, s in enumerate(u.shape)))

def _cat(pieces: list[UOp], axis: int) -> UOp:
  """pieces joined along axis, on their (common) device: each padded to the whole size, then added (or or-ed)."""
  total, at, out = sum(p.shape[axis] for p in pieces), 0, None
  for p in pieces:
    n = p.shape[axis]
    if n:
      padded = p if n == total else UOp(Ops.PAD, p.dtype, (p,), tuple((at, total - at - n) if i == axis else (0, 0)
                                                                        for i in range(len(p.shape))))
      out = padded if out is None else out.alu(Ops.OR if p.dtype is dtypes.bool else Ops.ADD, padded)
    at += n
  assert out is not None, "internal: a tensor with no elements is never sharded"
  return out

def shard_uop(u: UOp, devices: tuple[str, ...], axis: int | None) -> UOp:
  """u (on one device) copied to each of `devices`, whole or split along axis (uneven when it doesn't divide)."""
  if axis is None: return multi([to_device(u, d) for d in devices], None)
  sizes, at, pieces = split_sizes(u.shape[axis], len(devices)), 0, []
  for d, n in zip(devices, sizes):
    pieces.append(to_device(_shrink(u, axis, at, at + n), d))
    at += n
  return multi(pieces, axis)

def replicated(m: UOp) -> list[UOp]:
  """Each device's whole copy of MULTI m (an all-gather when m is sharded)."""
  if m.arg is None: return list(m.src)
  return [_cat([to_device(s, d.device) for s in m.src], m.arg) for d in m.src]

def gather(m: UOp, device: str) -> UOp:
  """MULTI m as one tensor on `device`."""
  if m.arg is None: return next((s for s in m.src if s.device == device), to_device(m.src[0], device))
  return _cat([to_device(s, device) for s in m.src], m.arg)

def _reduce_op(a: UOp, b: UOp, op: Ops) -> UOp:
  return a.alu(Ops.OR if op is Ops.ADD and a.dtype is dtypes.bool else op, b)

def all_reduce(parts: list[UOp], op: Ops) -> list[UOp]:
  """Each device's copy of op(parts): small ones directly (every device reduces every part, in the same order, so
  the copies are equal), big ones around a ring (chunk c is reduced device to device, ending on device c, then
  copied to the others)."""
  n, numel = len(parts), prod(parts[0].shape)
  devices = [p.device for p in parts]
  if numel < RING_MIN_ELEMENTS or n < 2:
    outs = []
    for d in devices:
      acc = to_device(parts[0], d)
      for p in parts[1:]: acc = _reduce_op(acc, to_device(p, d), op)
      outs.append(acc)
    return outs
  shape, flat = parts[0].shape, [UOp(Ops.RESHAPE, p.dtype, (p,), (numel,)) for p in parts]
  sizes = split_sizes(numel, n)
  starts = [sum(sizes[:c]) for c in range(n)]
  owned = []
  for c in range(n):
    lo, hi = starts[c], starts[c] + sizes[c]
    acc = _shrink(flat[(c + 1) % n], 0, lo, hi)
    for s in range(2, n + 1):
      dev = (c + s) % n
      acc = _reduce_op(to_device(acc, devices[dev]), _shrink(flat[dev], 0, lo, hi), op)
    owned.append(acc)  # on device c
  return [UOp(Ops.RESHAPE, parts[0].dtype, (_cat([to_device(owned[c], d) for c in range(n) if sizes[c]], 0),), shape)
          for d in devices]

# ***** the rules: each op over MULTI sources becomes a MULTI of the op over each device's shards *****

def _same_layout(m: UOp, axis: int | None, bnds: list[tuple[int, int]] | None) -> bool:
  return m.arg == axis and (axis is None or m.bounds == bnds)

def _shards_for(x: UOp, axis: int | None, bnds: list[tuple[int, int]] | None, devices: list[str]) -> list[UOp]:
  """x's piece on each device for a result laid out as (axis, bnds)."""
  if x.op is Ops.MULTI and _same_layout(x, axis, bnds): return list(x.src)
  # a graph on one device (or on none: device-less constants) is whole: each device takes its piece
  whole = replicated(x) if x.op is Ops.MULTI else [to_device(x, d) if x.device is not None else x for d in devices]
  if axis is None or not x.shape: return whole
  return [_shrink(w, axis, lo, hi) for w, (lo, hi) in zip(whole, bnds)]  # type: ignore[arg-type]

def distribute(u: UOp) -> UOp | None:
  """An elementwise op (or CONTIGUOUS, ASSIGN, CONST) over MULTI sources: the op on each device's pieces, laid out
  as its first sharded source (an ASSIGN: as its target), the other sources resharded to match."""
  ms = [s for s in u.src if s.op is Ops.MULTI]
  if not ms: return None
  devices = [s.device for s in ms[0].src]
  if any([s.device for s in m.src] != devices for m in ms):
    raise ValueError(f"{u.op.name.lower()}: sources sharded over different devices: {[m.device for m in ms]}")
  lead = u.src[0] if u.op is Ops.ASSIGN else next((m for m in ms if m.arg is not None), ms[0])
  axis, bnds = lead.arg, (lead.bounds if lead.arg is not None else None)
  per_src = [_shards_for(s, axis, bnds, devices) for s in u.src]
  return multi([u.replace(src=tuple(p[i] for p in per_src)) for i in range(len(devices))], axis)

def _reshape_rule(u: UOp, m: UOp) -> UOp:
  if m.arg is None: return multi([UOp(Ops.RESHAPE, s.dtype, (s,), u.arg) for s in m.src], None)
  old, new, a = m.shape, u.arg, m.arg
  before = prod(old[:a])
  sizes = [s.shape[a] for s in m.src]
  for b in range(len(new)):
    if prod(new[:b]) != before or (new[b] == 1 and old[a] != 1): continue
    if all((n * new[b]) % old[a] == 0 for n in sizes):
      shapes = [tuple((n * new[b]) // old[a] if i == b else x for i, x in enumerate(new)) for n in sizes]
      return multi([UOp(Ops.RESHAPE, s.dtype, (s,), shp) for s, shp in zip(m.src, shapes)], b)
  # the reshape would move elements between devices: gather, reshape, and keep the result whole on every device
  return multi([UOp(Ops.RESHAPE, w.dtype, (w,), new) for w in replicated(m)], None)

def _movement_rule(u: UOp, m: UOp) -> UOp:
  a, op, arg = m.arg, u.op, u.arg
  if a is None: return multi([UOp(op, s.dtype, (s,), arg) for s in m.src], None)
  if op is Ops.PERMUTE: return multi([UOp(op, s.dtype, (s,), arg) for s in m.src], arg.index(a))
  if op is Ops.EXPAND:
    return multi([UOp(op, s.dtype, (s,), tuple(s.shape[a] if i == a else x for i, x in enumerate(arg)))
                  for s in m.src], a)
  if op is Ops.FLIP and not arg[a]: return multi([UOp(op, s.dtype, (s,), arg) for s in m.src], a)
  if op is Ops.PAD:
    k = len(m.src)
    def pad_of(i: int) -> tuple:  # the pad along the axis goes to the first and the last shard
      return tuple(((arg[j][0] if i == 0 else 0), (arg[j][1] if i == k - 1 else 0)) if j == a else p
                   for j, p in enumerate(arg))
    return multi([UOp(op, s.dtype, (s,), pad_of(i)) for i, s in enumerate(m.src)], a)
  if op is Ops.SHRINK:
    lo, hi = arg[a]
    cut = [(max(lo, b0) - b0, min(hi, b1) - b0) for b0, b1 in m.bounds]
    if all(e > s for s, e in cut):  # every device keeps some rows: shrink each shard
      return multi([UOp(op, s.dtype, (s,), tuple(c if j == a else p for j, p in enumerate(arg)))
                    for s, c in zip(m.src, cut)], a)
  # a flip along the sharded axis, or a shrink leaving a device nothing: on whole copies
  return multi([UOp(op, w.dtype, (w,), arg) for w in replicated(m)], None)

def _reduce_rule(u: UOp, m: UOp) -> UOp:
  op, axes = u.arg
  parts = [UOp(Ops.REDUCE_AXIS, s.dtype, (s,), u.arg) for s in m.src]
  if m.arg is None or m.arg not in axes: return multi(parts, m.arg)
  return multi(all_reduce(parts, op), None)  # across the sharded axis: each device has a partial result

def _device_rule(d: UOp) -> UOp | None:
  return multi([UOp(Ops.DEVICE, arg=x) for x in d.arg], None) if d.arg.__class__ is tuple else None

def _copy_rule(u: UOp, x: UOp, d: UOp) -> UOp | None:
  if d.op is Ops.MULTI:  # to several devices: whole copies
    devices = [s.arg for s in d.src]
    if x.op is Ops.MULTI:
      if [s.device for s in x.src] == devices: return x
      x = gather(x, x.src[0].device)
    return multi([to_device(x, dv) for dv in devices], None)
  if x.op is Ops.MULTI: return gather(x, d.arg)
  return None

pm_multi = PatternMatcher([
  (UPat(Ops.DEVICE, name="d"), _device_rule),
  (UPat(Ops.COPY, src=(UPat(name="x"), UPat(name="d")), name="u"), _copy_rule),
  # autograd markers have done their work
  (UPat(GroupOp.Marker, src=(UPat(Ops.MULTI, name="m"),), allow_any_len=True), lambda m: m),
  (UPat(Ops.RESHAPE, src=(UPat(Ops.MULTI, name="m"),), name="u"), _reshape_rule),
  (UPat(GroupOp.Movement - {Ops.RESHAPE}, src=(UPat(Ops.MULTI, name="m"),), name="u"), _movement_rule),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.MULTI, name="m"),), name="u"), _reduce_rule),
  (UPat(GroupOp.Elementwise | {Ops.CONST, Ops.CONTIGUOUS, Ops.ASSIGN}, name="u"), distribute),
])

def layout(u: UOp) -> UOp | None:
  """u's graph laid out over its devices, a MULTI (UOp.axis and UOp.bounds of a node that isn't a MULTI read it)."""
  return out if (out := lower([u])[0]).op is Ops.MULTI else None
uop_ops.shard_layout_of[0] = layout

def lower(outs: list[UOp]) -> list[UOp]:
  """Each output as per-device graphs: a MULTI of one graph per device, or a plain graph on one device."""
  sink = graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(outs)), pm_multi)
  return list(sink.src)
