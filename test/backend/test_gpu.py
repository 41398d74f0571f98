"""GPU-style codegen (thread indices, LOCAL/GROUP opts, local memory and barriers) and the CL device: names, the
"GPU" alias, copies between devices. The numeric checks run on CL (PoCL runs OpenCL on the CPU) and skip without it."""
from __future__ import annotations
import numpy as np
import pytest
from attograd import Device, Tensor
from attograd.codegen import get_program
from attograd.codegen.heuristic import gpu_optimizations
from attograd.codegen.kernel import Opt
from attograd.codegen.lowerer import new_kernel
from attograd.device import DeviceUnavailable
from attograd.dtype import dtypes
from attograd.engine.realize import CompiledRunner
from attograd.schedule import create_schedule
from attograd.renderer.cstyle import OpenCLRenderer
from attograd.uop.ops import Ops

CL_OK, CL_WHY = Device.available("CL")
needs_cl = pytest.mark.skipif(not CL_OK, reason=f"CL unavailable: {CL_WHY}")

def _kernel(t: Tensor):
  (ast,) = [si.ast for si in create_schedule([t.uop])[0] if si.ast.op is Ops.SINK]
  return ast

def _data(*shape: int) -> np.ndarray: return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 13) - 6

# ***** device-free: what the lowering produces for a GPU renderer *****

def test_output_axes_become_thread_indices() -> None:
  spec = get_program(_kernel(Tensor(_data(64, 48)).T * 2), OpenCLRenderer(), [Opt("LOCAL", 1, 16), Opt("LOCAL", 0, 4)])
  assert "for (" not in spec.src and "get_group_id(0)" in spec.src and "get_local_id(1)" in spec.src
  assert spec.global_size == (4, 12) and spec.local_size == (16, 4)  # innermost axis is dimension 0

def test_group_uses_local_memory_and_barrier() -> None:
  spec = get_program(_kernel(Tensor(_data(8, 256)).sum(axis=1)), OpenCLRenderer(), [Opt("GROUP", 1, 32)])
  assert "__local float temp" in spec.src and spec.src.count("barrier(CLK_LOCAL_MEM_FENCE);") == 1
  assert spec.global_size == (8,) and spec.local_size == (32,)

def test_gpu_heuristic_picks_group_for_few_outputs_and_local_otherwise() -> None:
  k = new_kernel(_kernel(Tensor(_data(4, 4096)).sum(axis=1)))
  gpu_optimizations(k)
  assert [o.op for o in k.applied] == ["GROUPTOP"]
  k = new_kernel(_kernel(Tensor(_data(64, 64)).T + 1))
  gpu_optimizations(k)
  assert {o.op for o in k.applied} == {"LOCAL"}

@pytest.mark.parametrize("opt, why", [(Opt("LOCAL", 1, 8), "reduce axis"), (Opt("GROUP", 0, 2), "output axis"),
                                      (Opt("GROUP", 1, 7), "not divisible")])
def test_bad_gpu_opts_are_named(opt: Opt, why: str) -> None:
  k = new_kernel(_kernel(Tensor(_data(4, 64)).sum(axis=1)))
  with pytest.raises(ValueError, match=why): k.apply_opt(opt)

def test_cpu_renderer_is_untouched_by_gpu_opts() -> None:
  spec = get_program(_kernel(Tensor(_data(8, 256)).sum(axis=1)), Device["CPU"].renderer)
  assert spec.global_size is None and spec.local_size is None and "barrier" not in spec.src

# ***** CL: numbers, names, copies *****

@needs_cl
@pytest.mark.parametrize("opts", [[Opt("LOCAL", 0, 4)], [Opt("GROUP", 1, 16)], [Opt("GROUPTOP", 1, 64)],
                                  [Opt("LOCAL", 0, 2), Opt("GROUPTOP", 2, 8)],
                                  [Opt("UNROLL", 1, 4), Opt("GROUP", 1, 8)]])
def test_reduce_opts_on_cl(opts: list[Opt]) -> None:
  x = _data(8, 256)
  t = Tensor(x, device="CL").max(axis=1) + Tensor(x, device="CL").sum(axis=1) * 0  # max: a non-ADD combine too
  items, _ = create_schedule([t.uop])
  for si in items:
    for b in si.bufs: b.allocate()
  for si in items:
    if si.ast.op is not Ops.SINK: continue
    spec = get_program(si.ast, Device["CL"].renderer, opts if "r_" in get_program(si.ast, Device["CL"].renderer).name
                       and len(si.ast.src) == 1 else None)
    CompiledRunner(spec)(list(si.bufs), {})
  out = np.frombuffer(items[-1].bufs[0].as_bytes(), np.float32)
  np.testing.assert_allclose(out, x.max(axis=1))

@needs_cl
def test_matmul_on_cl_matches_numpy() -> None:
  a, b = _data(33, 20), _data(20, 17)
  np.testing.assert_allclose((Tensor(a, device="CL") @ Tensor(b, device="CL")).numpy(), a @ b, rtol=1e-5)

@needs_cl
def test_to_cl_and_back_copies() -> None:
  x = _data(3, 5)
  t = Tensor(x).to("CL")
  assert t.device == "CL"
  u = (t * 2).to("CPU")
  assert u.device == "CPU"
  np.testing.assert_array_equal(u.numpy(), x * 2)
  np.testing.assert_array_equal((Tensor(x, device="CL").to("PYTHON") + 1).numpy(), x + 1)

@needs_cl
def test_mixing_cl_and_cpu_names_both() -> None:
  with pytest.raises(ValueError, match="CPU.*CL|CL.*CPU"): Tensor([1.0], device="CPU") + Tensor([1.0], device="CL")

@needs_cl
def test_gpu_alias_names_a_gpu_style_device() -> None:
  assert Device.canonicalize("GPU") in ("CUDA", "CL")
  assert Tensor([1.0, 2.0], device="GPU").device == Device.canonicalize("GPU")

def test_gpu_alias_fails_clearly_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(Device, "_gpu", None)
  monkeypatch.setattr(Device, "available", lambda name: (False, f"{name}: not here."))
  with pytest.raises(DeviceUnavailable, match="GPU: no GPU-style device.*CUDA: not here.*CL: not here"):
    Device.canonicalize("GPU")

@needs_cl
def test_cl_number_past_the_devices_is_its_own_context() -> None:
  # CL:n past the last OpenCL device is a context of its own on a real device (so CL:0, CL:1 work as two devices on
  # PoCL's one), with buffers of its own
  from attograd.runtime.ops_cl import list_devices
  name = f"CL:{len(list_devices())}"
  ok, why = Device.available(name)
  assert ok, why
  assert Tensor([1.0, 2.0], device=name).add(1).tolist() == [2.0, 3.0]

@needs_cl
def test_cl_build_error_has_the_log() -> None:
  with pytest.raises(RuntimeError, match="(?s)building the program failed.*not_a_type"):
    Device["CL"].compiler.compile("__kernel void k(__global float* a) { not_a_type x; }")

@needs_cl
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.int64, dtypes.bool])
def test_cl_storage_dtypes(dtype) -> None:
  x = np.array([1.5, -2.25, 0.0, 3.0], np.float32)
  t = Tensor(x, device="CL").cast(dtype)
  got = (t + t).cast(dtypes.float32).numpy() if dtype is not dtypes.bool else (t | t).cast(dtypes.float32).numpy()
  want = x.astype(np.float64) if dtype is not dtypes.int64 else x.astype(np.int64)
  want = (want != 0) if dtype is dtypes.bool else want + want
  np.testing.assert_allclose(got, np.asarray(want, np.float32))

def _available_cl_in_subprocess(code: str = "", **env: str) -> str:
  import os, subprocess, sys
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  prog = code + "\nfrom attograd import Device\nprint(Device.available('CL'))"
  r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120,
                     env={**os.environ, "PYTHONPATH": root, **env})
  assert r.returncode == 0, r.stderr
  return r.stdout

def test_cl_without_library_says_what_to_install() -> None:
  hide = ("import ctypes\nclass NoCL(ctypes.CDLL):\n  def __init__(self, name, *a, **k):\n"
          "    if name and 'OpenCL' in str(name): raise OSError(name)\n    super().__init__(name, *a, **k)\n"
          "ctypes.CDLL = NoCL")
  out = _available_cl_in_subprocess(hide)
  assert "False" in out and "libOpenCL.so was not found" in out and "pocl-opencl-icd" in out

def test_cl_without_platform_says_so(tmp_path) -> None:
  if not CL_OK: pytest.skip(f"CL unavailable: {CL_WHY}")
  out = _available_cl_in_subprocess(OCL_ICD_VENDORS=str(tmp_path))  # the ICD loader finds no drivers there
  assert "False" in out and "no OpenCL platform" in out

@needs_cl
def test_program_binaries_load_in_a_fresh_process(tmp_path) -> None:
  # attograd's disk cache keeps each program's binary; PoCL's own kernel cache, shared by every process, is off (a
  # process reading another's half-written entry got a binary without kernel metadata, and loading it aborted the
  # interpreter). Two processes build the same kernels at once into an empty cache, a third runs them from it.
  import os, subprocess, sys
  code = ("import os; from attograd import Tensor, dtypes;"
          "x = Tensor.arange(12, device='CL', dtype=dtypes.int32).reshape(3, 4).contiguous().realize();"
          "x.assign(x - 3); print(x.sum().item()); assert os.environ['POCL_KERNEL_CACHE'] == '0'")
  env = {k: v for k, v in os.environ.items() if k not in ("POCL_KERNEL_CACHE", "POCL_CACHE_DIR")}
  env["ATTOGRAD_CACHE_DIR"] = str(tmp_path)
  def run() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  procs = [run(), run()]
  outs = [p.communicate(timeout=300) for p in procs] + [run().communicate(timeout=300)]
  assert [o.decode().strip() for o, _ in outs] == ["30"] * 3, [e.decode()[-500:] for _, e in outs]
  assert os.listdir(tmp_path / "compile")  # the third process found the binaries there
