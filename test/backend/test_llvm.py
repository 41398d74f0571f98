"""The LLVM device: runs with no C compiler, both ways of reaching LLVM, its cache, its IR, and C edge cases."""
from __future__ import annotations
import os, subprocess, sys, textwrap
import numpy as np
import pytest
from attograd import Device, Tensor, dtypes
from attograd.codegen import get_program
from attograd.schedule import create_schedule
from attograd.renderer.llvmir import LLVMRenderer
from attograd.uop.ops import Ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ok, why = Device.available("LLVM")
needs_llvm = pytest.mark.skipif(not ok, reason=f"LLVM unavailable: {why}")

def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
  full_env = {**os.environ, "PYTHONPATH": ROOT, **env}
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env,
                        timeout=120)

CODE = ("from attograd import Tensor; a = Tensor.arange(12).float().reshape(3, 4); "
        "print((a @ a.T).sum().item(), a.exp2().max().item())")

@needs_llvm
def test_runs_without_a_c_compiler(tmp_path) -> None:
  # no gcc, cc, clang or ld reachable: PATH is empty and CC points nowhere; a fresh cache forces real compiles
  r = run_py(CODE, DEV="LLVM", CC="/nonexistent", PATH="/nonexistent", ATTOGRAD_CACHE_DIR=str(tmp_path))
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == ["1134.0", "2048.0"]
  assert os.listdir(tmp_path / "compile")  # the object code went to the disk cache

@pytest.mark.parametrize("backend", ["llvmlite", "libllvm"])
def test_each_backend(backend: str, tmp_path) -> None:
  r = run_py(CODE, DEV="LLVM", LLVM_BACKEND=backend, PATH="/nonexistent", ATTOGRAD_CACHE_DIR=str(tmp_path))
  if r.returncode != 0 and "no LLVM to compile with" in r.stderr: pytest.skip(f"{backend} not installed here")
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == ["1134.0", "2048.0"]

def test_unavailable_says_what_to_install() -> None:
  code = "import sys; sys.modules['llvmlite'] = None\nfrom attograd import Device; print(Device.available('LLVM'))"
  r = run_py(code, LIBLLVM="/nonexistent/libLLVM.so")
  assert r.returncode == 0, r.stderr
  assert "False" in r.stdout and "pip install llvmlite" in r.stdout
  assert "llvmlite:" in r.stdout and "libllvm:" in r.stdout  # each way of loading LLVM says why it failed

def _program(t: Tensor):
  items, _ = create_schedule([t.uop])
  return get_program(items[-1].ast, LLVMRenderer())

def test_ir_uses_vectors_and_loops() -> None:
  a, b = Tensor.empty(64, 64, device="PYTHON"), Tensor.empty(64, 64, device="PYTHON")
  src = _program(a @ b).src
  assert "phi i32" in src and "x float>" in src and "reassoc" not in src and "nsz" not in src
  # the products are summed by llvm.fma, written by the code generator; LLVM may fuse nothing itself (no contract)
  assert "@llvm.fma.v" in src and "contract" not in src

@needs_llvm
@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int32, dtypes.uint32, dtypes.int64])
def test_int_division_edges(dt) -> None:
  # C truncates toward zero; x/0 and MIN/-1 trap on x86, here they give what the PYTHON device gives
  lo = -(2 ** (dt.itemsize * 8 - 1)) if not dtypes.is_unsigned(dt) else 0
  xs, ys = [7, -7, 7, -7, 5, lo, lo], [2, 2, -2, -2, 0, -1, 1]
  if dtypes.is_unsigned(dt): xs, ys = [7, 5, 0, 9], [2, 0, 3, 1]
  def run(dev: str) -> tuple[list, list]:
    x, y = Tensor(xs, dtype=dt, device=dev), Tensor(ys, dtype=dt, device=dev)
    return x._alu(Ops.IDIV, y).tolist(), x._alu(Ops.MOD, y).tolist()  # the raw ops, no zero-divisor guard
  assert run("LLVM") == run("PYTHON")

@needs_llvm
def test_half_and_bfloat16_casts_match_python() -> None:
  vals = [0.1, -2.5, 65504.0, 70000.0, 1e-8, 3.14159, float("inf"), -0.0]
  for src in (dtypes.float32, dtypes.float64):
    for dst in (dtypes.float16, dtypes.bfloat16):
      got = Tensor(vals, dtype=src, device="LLVM").cast(dst).cast(dtypes.float32).tolist()
      want = Tensor(vals, dtype=src, device="PYTHON").cast(dst).cast(dtypes.float32).tolist()
      assert got == want, (src, dst)

@needs_llvm
@pytest.mark.parametrize("src", [dtypes.float32, dtypes.float64, dtypes.float16])
def test_float_to_int_edges_match_python(src) -> None:
  # LLVM's fptosi is poison out of range; the renderer wraps like the PYTHON device and maps NaN/inf to the minimum
  vals = [1.5, -1.5, 300.7, -2.0, 65504.0, -65504.0, float("nan"), float("inf"), -float("inf")]
  if src is not dtypes.float16: vals += [1e10, 1.8e19, -9e18]
  for dst in dtypes.ints:
    got = Tensor(vals, dtype=src, device="LLVM").cast(dst).tolist()
    assert got == Tensor(vals, dtype=src, device="PYTHON").cast(dst).tolist(), (src, dst)

@needs_llvm
@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64])
def test_shifts_past_the_width_match_python(dt) -> None:
  xs, ys = [5, 7, 100, 1, 3] if dtypes.is_unsigned(dt) else [5, -7, 100, -1, 3], [1, 3, 40, 70, 0]
  for op in (Ops.SHL, Ops.SHR):
    got = Tensor(xs, dtype=dt, device="LLVM")._alu(op, Tensor(ys, dtype=dt, device="LLVM")).tolist()
    assert got == Tensor(xs, dtype=dt, device="PYTHON")._alu(op, Tensor(ys, dtype=dt, device="PYTHON")).tolist(), op

@needs_llvm
@pytest.mark.parametrize("threads", [1, 3, 8])
def test_parallel_kernels_split_across_threads(threads: int, monkeypatch) -> None:
  from attograd.engine.realize import get_runner
  monkeypatch.setenv("LLVM_THREADS", str(threads))
  rows = 257 + threads  # a fresh kernel per case (programs are cached by their AST), and rows % threads != 0
  x = np.random.default_rng(0).standard_normal((rows, 300)).astype(np.float32)
  t = Tensor(x, device="LLVM")
  out = (t * 2).sum(1) + t.max(1)
  items, _ = create_schedule([out.uop])
  assert any(get_runner("LLVM", si.ast).prg.threads == min(threads, rows) for si in items)
  np.testing.assert_allclose(out.numpy(), (x * 2).sum(1) + x.max(1), rtol=1e-5, atol=1e-4)

@pytest.mark.parametrize("backend", ["llvmlite", "libllvm"])
def test_unresolved_symbol_is_an_error_not_a_crash(backend: str) -> None:
  code = """
  from attograd.runtime import ops_llvm
  be = ops_llvm._open_backend()
  obj = be.compile("declare float @no_such_fn(float)\\ndefine void @k(ptr %o) {\\n"
                   "  %v = call float @no_such_fn(float 1.0)\\n  store float %v, ptr %o\\n  ret void\\n}\\n")
  try: be.load(obj, ["k"])
  except RuntimeError as e: print("error:", e)
  """
  r = run_py(code, LLVM_BACKEND=backend)
  if r.returncode != 0 and "no LLVM to compile with" in r.stderr: pytest.skip(f"{backend} not installed here")
  assert r.returncode == 0, r.stderr
  assert r.stdout.startswith("error:") and ("no_such_fn" in r.stdout or "no_such_fn" in r.stderr)

def test_exit_after_llvm_kernels_is_quiet() -> None:
  # programs still alive at interpreter exit are freed after the module's globals are cleared: nothing may be printed
  import subprocess, sys
  code = "from attograd import Tensor\nx = (Tensor([1.0, 2.0], device='LLVM') * 3).exp().tolist()\nprint(x[0] > 0)"
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]
  assert "Exception ignored" not in r.stderr and "Error" not in r.stderr, r.stderr[-2000:]

def _relocation_types(obj: bytes) -> set[int]:
  """The relocation types of an ELF64 object's RELA sections."""
  import struct
  shoff, shentsize, shnum = struct.unpack_from("<Q", obj, 0x28)[0], *struct.unpack_from("<HH", obj, 0x3A)
  out = set()
  for i in range(shnum):
    _, sh_type, _, _, off, size, _, _, _, entsize = struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
    if sh_type != 4: continue  # SHT_RELA: (offset, info, addend) entries, the type in info's low 32 bits
    out |= {struct.unpack_from("<Q", obj, at + 8)[0] & 0xFFFFFFFF for at in range(off, off + size, entsize)}
  return out

@pytest.mark.skipif(os.uname().machine != "x86_64", reason="reads x86-64 relocation types")
@pytest.mark.parametrize("backend", ["llvmlite", "libllvm"])
def test_kernels_reach_constants_and_libm_through_64_bit_addresses(backend: str) -> None:
  # the JIT maps a kernel's code and its constant pools separately; with the small code model their 32-bit offsets
  # overflowed once they landed over 2 GB apart in a big process, and MCJIT aborted the process (a test worker died
  # in a kernel calling pow). Every relocation must be a 64-bit absolute one (R_X86_64_64 = 1): no PC32 (2),
  # PLT32 (4), 32/32S (10/11) or GOT-relative (9, 41, 42) offsets
  code = """
  from attograd import Device, Tensor
  from attograd.engine import realize
  x = Tensor([1.5, 2.0, 3.0, 0.25] * 8, device="LLVM")
  outs = [x ** (x + 0.3), x.double() ** 1.7, x.exp() * 3.1 + 0.7, (x.sin() * 1e-3).half().float(), x.sigmoid() @ x]
  for o in outs: o.realize()
  comp = Device["LLVM"].compiler
  print(comp.backend.name)
  for key, r in list(realize._runners.items()):
    if key[0] == "LLVM": print(r.spec.name, comp.compile(r.spec.src).hex())
  """
  r = run_py(code, LLVM_BACKEND=backend)
  if r.returncode != 0 and "no LLVM to compile with" in r.stderr: pytest.skip(f"{backend} not installed here")
  assert r.returncode == 0, r.stderr[-2000:]
  name, *kernels = r.stdout.split("\n")
  assert name == backend and len([k for k in kernels if k]) >= 5
  for line in filter(None, kernels):
    kname, obj = line.split()
    assert _relocation_types(bytes.fromhex(obj)) <= {1}, (kname, _relocation_types(bytes.fromhex(obj)))
