"""BEAM search: try the kernel optimizer's actions on a kernel, time each candidate on the device, keep the best.

`BEAM=n` (or `Context(BEAM=n)`) keeps the n fastest action lists each round and extends them by one action, until a
round finds nothing faster. The winner is cached on disk (by kernel, device and attograd's code version), so the next
process gets it without searching."""
from __future__ import annotations
import hashlib, json, math, sys, time
from typing import Callable
from attograd.codegen.heuristic import gpu_optimizations, hand_coded_optimizations
from attograd.codegen.kernel import Kernel, Opt
from attograd.codegen.lowerer import new_kernel
from attograd.codegen.program_cache import ast_key
from attograd.device import Buffer, Device, disk_cache_get, disk_cache_put
from attograd.dtype import PtrDType
from attograd.helpers import DEBUG, IGNORE_BEAM_CACHE, prod
from attograd.renderer import ProgramSpec, Renderer
from attograd.uop.ops import Ops, UOp

MAX_ROUNDS = 5          # actions added to one candidate at most
MAX_CANDIDATES = 400    # programs timed per kernel at most

def _actions(k: Kernel) -> list[Opt]:
  """Every single action that applies to this kernel as it is now."""
  acts: list[Opt] = []
  for ax, size in enumerate(k.full_shape):
    if size == 1 or ax in k.upcasted or ax in k.unrolled: continue
    red = ax >= k.first_reduce
    for amt in (2, 3, 4, 5, 8, 16):
      if size % amt or amt > size: continue
      acts.append(Opt("UNROLL" if red else "UPCAST", ax, amt))
      if k.lane is None and amt in (4, 8, 16): acts.append(Opt("RLANES" if red else "LANES", ax, amt))
    for amt in (4, 8, 16):  # odd sizes: pad up to a multiple first (at most doubling the axis)
      if size % amt and -(-size // amt) * amt - size < size and ax not in k.locals_ + k.grouped:
        acts.append(Opt("PADTO", ax, amt))
  if not (k.upcasted or k.unrolled or k.parallel):  # cache blocking comes first
    acts += [Opt("BLOCK", ax, b) for ax in range(k.first_reduce) for b in (64, 128, 256, 512)
             if k.full_shape[ax] % b == 0 and k.full_shape[ax] > b]
  if not k.parallel and k.first_reduce > 0: acts.append(Opt("THREAD", 0, 0))
  return acts

def _kernel(ast: UOp, opts: list[Opt]) -> Kernel | None:
  k = new_kernel(ast)
  try:
    for o in opts: k.apply_opt(o)
  except ValueError: return None
  # keep the register budget sane: an unrolled tile of more than 256 values only spills
  return k if prod(k.full_shape[a] for a in k.upcasted + k.unrolled) <= 256 else None

def _time(spec: ProgramSpec, bufs: list[Buffer], runs: int = 3) -> float:
  dev = Device[spec.device]
  prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
  args = [bufs[i].handle for i in spec.globals]
  vals = tuple(v.arg[1] for v in spec.vars)  # symbolic values: any in range gives a fair comparison
  launch = {} if spec.global_size is None else {"global_size": spec.global_size, "local_size": spec.local_size}
  best = math.inf
  for _ in range(runs):
    st = time.perf_counter()
    prg(*args, vals=vals, **launch)
    dev.synchronize()
    best = min(best, time.perf_counter() - st)
  return best

def _scratch_buffers(ast: UOp, device: str) -> list[Buffer]:
  """Zeroed buffers the size of the kernel's globals (numbered as in its DEFINE_GLOBALs)."""
  globs = sorted({u.arg: u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}.items())
  out: list[Buffer] = []
  for i, g in globs:
    assert isinstance(g.dtype, PtrDType) and i == len(out)
    n = max(g.dtype.bufsize, 1)
    out.append(Buffer(device, n, g.dtype.base, initial=bytes(n * g.dtype.base.itemsize)).allocate())
  return out

def _key(ast: UOp, renderer: Renderer, amt: int) -> str:
  return hashlib.sha256(f"beam{amt}|{ast_key(ast, renderer, None)}".encode()).hexdigest()

def beam_search(k: Kernel, renderer: Renderer, amt: int,
                build: Callable[[UOp, Renderer, list[Opt]], ProgramSpec]) -> Kernel:
  """The kernel `k` (a loop space with no actions taken yet) with the fastest action list found applied (the list is
  cached on disk); `build` makes a candidate's program (the code generator's pipeline, which calls this search)."""
  ast = k.ast
  key = _key(ast, renderer, amt)
  if not IGNORE_BEAM_CACHE and (hit := disk_cache_get("beam", key)) is not None:
    try:
      if (cached := _kernel(ast, [Opt(*o) for o in json.loads(hit)])) is not None: return cached
    except (ValueError, TypeError): pass  # a damaged entry: search again
  bufs = _scratch_buffers(ast, renderer.device)
  timed: dict[tuple[Opt, ...], float] = {}
  def measure(opts: tuple[Opt, ...]) -> float:
    if opts in timed: return timed[opts]
    if _kernel(ast, list(opts)) is None: t = math.inf
    else:
      try: t = _time(build(ast, renderer, list(opts)), bufs)
      except Exception: t = math.inf  # an action the language can't express here: not a candidate
    timed[opts] = t
    return t
  # seeds: plain loops and the hand-written heuristic's choice
  hk = new_kernel(ast)
  if renderer.has_local: gpu_optimizations(hk, renderer.local_max)
  else: hand_coded_optimizations(hk, (renderer.thread_min_work, renderer.thread_min_bytes))
  beam = sorted({(), tuple(hk.applied)}, key=measure)[:amt]
  name = build(ast, renderer, []).name
  for rnd in range(MAX_ROUNDS):
    cands = []
    for opts in beam:
      if (kb := _kernel(ast, list(opts))) is not None: cands += [opts + (a,) for a in _actions(kb)]
    cands = [c for c in dict.fromkeys(cands) if c not in timed][:max(0, MAX_CANDIDATES - len(timed))]
    for i, c in enumerate(cands):
      measure(c)
      if sys.stderr.isatty() or DEBUG >= 1:
        done = int(30 * (i + 1) / max(len(cands), 1))
        print(f"\rBEAM={amt} {name:30s} round {rnd + 1} [{'#' * done}{'.' * (30 - done)}] {i + 1}/{len(cands)}",
              end="", file=sys.stderr)
    new = sorted(set(beam) | set(cands), key=measure)[:amt]
    if measure(new[0]) >= measure(beam[0]) * 0.99: break  # nothing faster this round
    beam = new
  best = beam[0]
  if sys.stderr.isatty() or DEBUG >= 1:
    print(f"\rBEAM={amt} {name:30s} {measure(()) * 1e6:9.1f} us -> {measure(best) * 1e6:9.1f} us  {list(best)}",
          file=sys.stderr)
  disk_cache_put("beam", key, json.dumps([[o.op, o.axis, o.amount] for o in best]).encode())
  won = _kernel(ast, list(best))
  assert won is not None  # it was timed, so it applies
  return won
