"""Runs the op table (optable.py) on every device: each row on every dtype it accepts, forward against PyTorch and,
for float dtypes, backward; every dtype it doesn't accept must raise. A public Tensor op without a row fails here.

Inputs hold the domain's edge values (0, -0, +-inf, NaN, subnormals, INT_MIN/INT_MAX, ...) in one tensor per input,
seen through a layout (contiguous, permuted, strided, flipped, expanded) that rotates over rows and dtypes, so each op
meets each layout without a kernel per combination. Known bugs of issue 13 are xfail: see optable.KNOWN.
"""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from attograd import Tensor, dtypes
from attograd.dtype import strong_dtype
from optable import (DTYPES, FLOATS, GRAD_DOMAIN, INPUTS, NON_OPS, ROWS, TOL, TORCH_NAME, UNREJECTED, Arg, Row, known,
                     torch)

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
LAYOUTS = ("contiguous", "permuted", "strided", "flipped", "expanded")
ROW_INDEX = {r.name: i for i, r in enumerate(ROWS)}

def layout_of(row: Row, dt: str, phase: str) -> str:
  return LAYOUTS[(ROW_INDEX[row.name] + DTYPES.index(dt) + (phase == "bwd")) % len(LAYOUTS)]

# ***** inputs on both sides *****

def make_args(row: Row, dt: str, phase: str) -> list[Arg]:
  domains = row.domains if phase != "bwd" else tuple(GRAD_DOMAIN.get(d, d) for d in row.domains)
  rng = np.random.default_rng(ROW_INDEX[row.name] * 100 + DTYPES.index(dt))
  return INPUTS[row.inputs](dt, domains, rng)

def _base(a: np.ndarray, dt: str) -> Tensor:
  t = Tensor(np.ascontiguousarray(a))
  return t.cast(dtypes.bfloat16).realize() if dt == "bfloat16" else t

def att_view(a: np.ndarray, dt: str, layout: str) -> tuple[np.ndarray, Tensor]:
  """(the values, a Tensor of them seen through `layout`); the values change only for 'expanded' (row 0 repeated)."""
  if a.ndim == 0 or a.size == 0: layout = "contiguous"
  if layout == "permuted" and a.ndim >= 2:
    rev = tuple(reversed(range(a.ndim)))
    return a, _base(a.transpose(rev), dt).permute(rev)
  if layout == "strided":
    b = np.zeros((2 * a.shape[0],) + a.shape[1:], a.dtype)
    b[::2] = a
    return a, _base(b, dt)[::2]
  if layout == "expanded":
    return np.broadcast_to(a[:1], a.shape).copy(), _base(a[:1], dt).expand(a.shape)
  if layout in ("flipped", "permuted"): return a, _base(np.flip(a, 0), dt).flip(0)
  return a, _base(a, dt)

def torch_tensor(a: np.ndarray, torch_name: str) -> Any:
  a = np.ascontiguousarray(a)
  if a.dtype.kind == "u" and torch_name == "int64": a = a.astype(np.int64)  # the carrier of a wide unsigned dtype
  return torch.from_numpy(a).to(getattr(torch, torch_name))  # (bfloat16 values arrive as float32: exact)

def build(row: Row, dt: str, phase: str) -> tuple[list[np.ndarray], list[Tensor], list[int], str]:
  """The argument values, attograd's arguments, which of them are data (differentiated), and the layout."""
  layout = layout_of(row, dt, phase)
  vals, ts, data = [], [], []
  for i, a in enumerate(make_args(row, dt, phase)):
    if a.role == "aux":
      vals.append(a.value)
      ts.append(Tensor(a.value))
      continue
    v, t = att_view(a.value, dt, layout)
    vals.append(v)
    ts.append(t)
    if a.role == "data": data.append(i)
  return vals, ts, data, layout

def as_list(out: Any) -> list[Any]: return list(out) if isinstance(out, (tuple, list)) else [out]

def torch_run(row: Row, dt: str, vals: list[np.ndarray], roles: list[str], grad: list[int] | None = None
              ) -> tuple[list[Any], list[Any] | None, bool]:
  """The reference: row.torch_fn in torch's version of `dt`; where torch lacks the op for it, in a wider carrier
  (int64, then float64) whose result is cast back. Returns (outputs, gradients of the data args or None, native)."""
  carriers = [TORCH_NAME[dt]] + (["int64"] if dt not in FLOATS else []) + ["float64"]
  err: Exception | None = None
  for k, name in enumerate(dict.fromkeys(carriers)):
    ts = [torch_tensor(v, name) if r != "aux" else torch.from_numpy(np.ascontiguousarray(v))
          for v, r in zip(vals, roles)]
    try:
      if grad is None:
        with torch.no_grad(): return [o for o in as_list(row.torch_fn(*ts))], None, k == 0
      for i in grad: ts[i].requires_grad_(True)
      outs = as_list(row.torch_fn(*ts))
      loss = sum((o * torch.from_numpy(cotangent(tuple(o.shape), i)).to(o.dtype)).sum()
                 for i, o in enumerate(outs) if o.is_floating_point())
      gs = torch.autograd.grad(loss, [ts[i] for i in grad], allow_unused=True)
      return outs, [torch.zeros_like(ts[i]) if g is None else g for i, g in zip(grad, gs)], k == 0
    except (RuntimeError, TypeError, NotImplementedError) as e: err = e
  raise AssertionError(f"{row.name}: PyTorch has no reference for {dt} in any carrier: {err}")

def cotangent(shape: tuple[int, ...], i: int) -> np.ndarray:
  # a fixed weight per output element, so every element's gradient is distinct
  return np.random.default_rng(7 + i).uniform(0.5, 1.5, shape)

# ***** comparing *****

def _kind(name: str) -> str: return "bool" if name == "bool" else "float" if name in FLOATS else "int"

def compare(got: Tensor, want: Any, row: Row, native: bool, what: str, args: list[np.ndarray] | None = None) -> None:
  # a weak result (int_tensor.clip(0.5) is weakfloat, as in tinygrad) holds its values in its strong dtype
  gname, wname = strong_dtype(got.dtype).name, str(want.dtype).removeprefix("torch.")
  assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)}, PyTorch {tuple(want.shape)}"
  assert _kind(gname) == _kind(wname), f"{what}: dtype {gname}, PyTorch {wname}"
  # torch widens int results to int64 (sum, argmax) where tinygrad's rules keep int32: only other dtypes must match
  if native and wname != "int64": assert gname == wname, f"{what}: dtype {gname}, PyTorch {wname}"
  g = got.numpy() if got.dtype is not dtypes.bfloat16 else got.float().numpy()
  w = want.detach()
  if gname in FLOATS:
    w = w.to(getattr(torch, gname)).to(torch.float64).numpy()
    g = g.astype(np.float64)
    atol, rtol = (t * row.tol for t in TOL[gname])
    with np.errstate(invalid="ignore"):
      ok = (g == w) | (np.isnan(g) & np.isnan(w)) | (np.abs(g - w) <= atol + rtol * np.abs(w))
  else:
    w = w.numpy().astype(g.dtype)  # wraps: the int64 carrier's result back to its unsigned dtype
    ok = g == w
  if ok.all(): return
  bad = np.argwhere(~ok) if ok.ndim else [()]
  lines = [f"{what}: {int((~ok).sum())} of {ok.size} values differ (tolerance {row.tol} x {TOL.get(gname, 'exact')})"]
  for idx in bad[:6]:
    idx = tuple(int(i) for i in idx)
    ins = [a[idx] for a in (args or []) if a.shape == ok.shape]
    lines.append(f"  at {idx}: got {g[idx]!r}, PyTorch {w[idx]!r}" + (f", inputs {ins}" if ins else ""))
  raise AssertionError("\n".join(lines))

def _xfail_known(request: pytest.FixtureRequest, row: Row, dt: str, device: str, phase: str) -> None:
  if (why := known(row.name, dt, device, phase)): request.applymarker(pytest.mark.xfail(reason=why, strict=False))

def repro(row: Row, dt: str, device: str, layout: str, phase: str) -> str:
  return f"{phase} {row.name} ({row.op}) dtype={dt} device={device} layout={layout} inputs={row.inputs}:{row.domain}"

# ***** the tests *****

FWD = [pytest.param(r, dt, id=f"{r.name}-{dt}") for r in ROWS for dt in r.dtypes]
BWD = [pytest.param(r, dt, id=f"{r.name}-{dt}") for r in ROWS if r.grad for dt in r.dtypes if dt in FLOATS]
REJ = [pytest.param(r, dt, id=f"{r.name}-{dt}") for r in ROWS for dt in DTYPES if dt not in r.dtypes]

@needs_torch
@pytest.mark.parametrize("row,dt", FWD)
def test_forward(request: pytest.FixtureRequest, device: str, row: Row, dt: str) -> None:
  _xfail_known(request, row, dt, device, "fwd")
  vals, ts, _, layout = build(row, dt, "fwd")
  what = repro(row, dt, device, layout, "forward")
  outs = as_list(row.att()(*ts))
  roles = [a.role for a in make_args(row, dt, "fwd")]
  want, _, native = torch_run(row, dt, vals, roles)
  assert len(outs) == len(want), f"{what}: {len(outs)} outputs, PyTorch {len(want)}"
  Tensor.realize(*outs)
  for i, (o, w) in enumerate(zip(outs, want)): compare(o, w, row, native, f"{what} output {i}", vals)

@needs_torch
@pytest.mark.parametrize("row,dt", BWD)
def test_backward(request: pytest.FixtureRequest, device: str, row: Row, dt: str) -> None:
  _xfail_known(request, row, dt, device, "bwd")
  vals, ts, data, layout = build(row, dt, "bwd")
  what = repro(row, dt, device, layout, "backward")
  outs = [o for o in as_list(row.att()(*ts)) if dtypes.is_float(o.dtype)]
  loss = sum((o * Tensor(cotangent(tuple(o.shape), i)).cast(o.dtype)).sum() for i, o in enumerate(outs))
  assert isinstance(loss, Tensor), f"{what}: no float output to differentiate"
  grads = loss.gradient(*[ts[i] for i in data], materialize_grads=True)
  roles = [a.role for a in make_args(row, dt, "bwd")]
  _, want, native = torch_run(row, dt, vals, roles, grad=data)
  assert want is not None
  # gradients take a few more rounded steps than the forward: 4x its tolerance
  for k, (g, w) in enumerate(zip(grads, want)):
    compare(g, w, row._replace(tol=row.tol * 4), native, f"{what} grad {k}", vals)

@pytest.mark.parametrize("row,dt", REJ)
def test_rejects(request: pytest.FixtureRequest, device: str, row: Row, dt: str) -> None:
  if row.name in UNREJECTED and dt in UNREJECTED[row.name][0].split():
    why = UNREJECTED[row.name][1]
    request.applymarker(pytest.mark.xfail(reason=f"accepts {dt} outside its list: {why}", strict=False))
  _, ts, _, layout = build(row, dt, "fwd")
  with pytest.raises((TypeError, ValueError, RuntimeError, IndexError)) as e:
    Tensor.realize(*as_list(row.att()(*ts)))
  assert str(e.value), f"{row.name} on {dt}: the error has no message"

# ***** the table covers the API *****

def public_ops() -> set[str]: return {n for n in dir(Tensor) if not n.startswith("_")}

def test_every_public_op_has_a_row() -> None:
  covered = {r.op for r in ROWS} | set(NON_OPS)
  missing = sorted(public_ops() - covered)
  assert not missing, f"public Tensor ops with no row in test/backend/optable.py (add one, or to NON_OPS): {missing}"

def test_table_is_consistent() -> None:
  stale = sorted(set(NON_OPS) - public_ops())
  assert not stale, f"NON_OPS names things Tensor doesn't have: {stale}"
  unknown = sorted({r.op for r in ROWS} - public_ops() - {"__getitem__"})
  assert not unknown, f"rows for ops Tensor doesn't have: {unknown}"
  names = [r.name for r in ROWS]
  assert len(names) == len(set(names)), f"duplicate row names: {sorted({n for n in names if names.count(n) > 1})}"
  for r in ROWS:
    assert r.inputs in INPUTS and set(r.dtypes) <= set(DTYPES), f"row {r.name}: bad inputs or dtypes"
    assert r.torch_fn is not None or torch is None, f"row {r.name} has no reference"
