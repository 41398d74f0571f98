"""Running a schedule: compile each kernel once (cached by its AST), copy between devices, report with DEBUG.
While a TinyJit captures, every kernel run here is also recorded (runner, buffers, variable values)."""
from __future__ import annotations
import time
from attograd.codegen import get_program
from attograd.device import Buffer, Device
from attograd.engine.nan import DEBUG_NAN, check_kernel
from attograd.engine.profile import PROFILER
from attograd import viz
from attograd.viz import VIZ
from attograd.engine.schedule import ScheduleItem
from attograd.helpers import DEBUG, GlobalCounters, colored
from attograd.renderer import ProgramSpec
from attograd.uop.ops import Ops, UOp

class CompiledRunner:
  """A kernel compiled for one device."""
  def __init__(self, spec: ProgramSpec):
    self.spec = spec
    dev = Device[spec.device]
    st = PROFILER.now() if PROFILER.active else 0.0
    lib = dev.compiler.compile_cached(spec.src)
    if PROFILER.active: PROFILER.span(spec.name, "compile", spec.device, st, PROFILER.now(), src_bytes=len(spec.src))
    self.prg = dev.runtime(spec.name, lib)
    self.var_names = [v.arg[0] for v in spec.vars if not v.arg[0].startswith("_")]
    # GPU kernels launch with their work-group counts and sizes; C kernels loop over everything themselves
    self.launch = {} if spec.global_size is None else {"global_size": spec.global_size, "local_size": spec.local_size}
  def __call__(self, bufs: list[Buffer], var_vals: dict[str, int]) -> float:
    args = [bufs[i]._buf for i in self.spec.globals]
    vals = tuple(var_vals[n] for n in self.var_names)
    if DEBUG >= 2 or PROFILER.active or VIZ:  # timed: the device's own timer on GPUs
      if self.launch: return self.prg(*args, vals=vals, wait=True, **self.launch)  # the device's own kernel timer
      st = time.perf_counter()
      self.prg(*args, vals=vals)
      return time.perf_counter() - st
    self.prg(*args, vals=vals, **self.launch)
    return 0.0

_runners: dict[tuple[str, UOp], CompiledRunner] = {}
def get_runner(device: str, ast: UOp) -> CompiledRunner:
  key = (device, ast)
  if (r := _runners.get(key)) is None:
    st = PROFILER.now() if PROFILER.active else 0.0
    spec = get_program(ast, Device[device].renderer)
    if PROFILER.active:
      PROFILER.span(spec.name, "lower", device, st, PROFILER.now(), opts=[str(o) for o in spec.applied_opts])
    r = _runners[key] = CompiledRunner(spec)
  return r

def _copy(dst: Buffer, src: Buffer) -> None:
  dst.allocate()
  if hasattr(dst.allocator, "as_memoryview"):  # host memory: copy straight into it, no staging copy
    src.copyout(dst.allocator.as_memoryview(dst._buf, dst.nbytes))
    return
  mv = memoryview(bytearray(src.nbytes))
  src.copyout(mv)
  dst.copyin(mv)

class CopyRunner:
  """A COPY between devices, as a runner the JIT can record and replay like a kernel."""
  def __call__(self, bufs: list[Buffer], var_vals: dict[str, int]) -> float:
    _copy(bufs[0], bufs[1])
    return 0.0
copy_runner = CopyRunner()

# the recording a TinyJit is making: (runner, buffers, variable values) per kernel run, or None when not capturing
capturing: list[tuple[CompiledRunner | CopyRunner, tuple[Buffer, ...], dict[str, int]]] | None = None

def run_schedule(items: list[ScheduleItem]) -> None:
  for si in items:
    for b in si.bufs: b.allocate()
    if si.ast.op is Ops.COPY:
      if capturing is not None: capturing.append((copy_runner, si.bufs, {}))
      st = PROFILER.now() if PROFILER.active else 0.0
      _copy(si.bufs[0], si.bufs[1])
      if PROFILER.active:
        PROFILER.span(f"copy {si.bufs[1].device} -> {si.bufs[0].device}", "copy", si.bufs[0].device, st, PROFILER.now(),
                      bytes=si.bufs[0].nbytes)
      GlobalCounters.global_mem += si.bufs[0].nbytes
      if DEBUG >= 2: print(f"{colored('copy', 'yellow')} {si.bufs[0].nbytes:>10d} bytes {si.bufs[1].device} -> {si.bufs[0].device}")
      continue
    device = si.bufs[0].device
    runner = get_runner(device, si.ast)
    var_vals = {v.arg[0]: val for v, val in si.var_vals}
    if capturing is not None: capturing.append((runner, si.bufs, var_vals))
    st = PROFILER.now() if PROFILER.active else 0.0
    et = runner(list(si.bufs), var_vals)
    if PROFILER.active: _profile_kernel(runner, si, st, et)
    if VIZ: viz.kernel_ran(device, si.ast, et)
    if DEBUG_NAN.value: check_kernel(runner.spec.name, si.bufs, runner.spec.outs)
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += runner.spec.op_estimate
    GlobalCounters.global_mem += sum(b.nbytes for b in si.bufs)
    if DEBUG >= 2:
      GlobalCounters.time_sum_s += et
      sp = runner.spec
      gflops = sp.op_estimate / et * 1e-9 if et > 0 else 0
      gbs = sum(b.nbytes for b in si.bufs) / et * 1e-9 if et > 0 else 0
      print(f"*** {device:7s} {GlobalCounters.kernel_count:4d} {sp.name:32s} {et*1e6:9.2f} us  {gflops:8.2f} GFLOPS {gbs:8.2f} GB/s"
            + (f"  opts {list(sp.applied_opts)}" if DEBUG >= 3 else ""))

def _profile_kernel(runner: CompiledRunner, si: ScheduleItem, st: float, et: float) -> None:
  """A kernel's span: its measured time (the device's own timer on GPUs), placed where the call started."""
  sp = runner.spec
  nbytes = sum(b.nbytes for b in si.bufs)
  rate = (lambda x: round(x / et * 1e-9, 3)) if et > 0 else (lambda x: 0)
  PROFILER.span(sp.name, "kernel", si.bufs[0].device, st, st + et, flops=sp.op_estimate, bytes=nbytes,
                global_size=sp.global_size, local_size=sp.local_size, gflops=rate(sp.op_estimate), gbs=rate(nbytes))
