"""Tensor cores and warp shuffles, checked without a GPU: kernels are lowered exactly as for CUDA (PythonGPURenderer is
the CUDA renderer with another `render`) and run by the PYTHON device's GPU emulator, which runs a work-group's threads
together and does mma.m16n8k16 with the fragment layout transcribed from the PTX ISA. The numbers are compared with
NumPy. (test_cuda_compile.py compiles the same kernels' CUDA source with nvcc; nothing here runs on hardware.)"""
from __future__ import annotations
import os, subprocess, sys
import numpy as np
import pytest
from attograd import Tensor
from attograd.codegen import get_program, lowerer
from attograd.codegen.kernel import Kernel, Opt
from attograd.codegen.lowerer import new_kernel
from attograd.dtype import dtypes
from attograd.schedule import create_schedule
from attograd.renderer.cstyle import ClangRenderer
from attograd.runtime.ops_python import PythonGPURenderer, PythonProgram, mma_fragment_layout, mma_m16n8k16, shuffle_xor
from attograd.uop.ops import Ops, UOp

R = PythonGPURenderer()

def emulate(t: Tensor, opts: list[Opt] | None = None, renderer=R) -> tuple[np.ndarray, list]:
  """Run the kernels of `t` (inputs realized on the CPU) on the emulator; (result, the programs' specs)."""
  items, _ = create_schedule([t.uop])
  mem: dict = {}
  def mv(b) -> memoryview:
    if b not in mem:
      mem[b] = memoryview(bytearray(b.nbytes))
      if b.is_allocated(): b.copyout(mem[b])
    return mem[b]
  specs = []
  for si in items:
    assert si.ast.op is Ops.SINK
    sp = get_program(si.ast, renderer, opts)
    specs.append(sp)
    PythonProgram(sp.name, bytes.fromhex(sp.src))(*[mv(si.bufs[i]) for i in sp.globals],
                                                  global_size=sp.global_size, local_size=sp.local_size)
  raw = bytes(mem[items[-1].bufs[0]])
  if t.dtype is dtypes.bfloat16: out = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
  else: out = np.frombuffer(raw, np.dtype(t.dtype.fmt))
  return out.reshape(t.shape), specs

def _rand(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)

def _low(x: np.ndarray, d) -> Tensor: return Tensor(x).cast(d).realize()
def _as_f32(x: np.ndarray, d) -> np.ndarray: return Tensor(x).cast(d).cast(dtypes.float32).numpy()  # rounded inputs

# ***** the emulated instruction itself *****

def test_fragment_layout_matches_ptx_figures() -> None:
  # entries read off the PTX ISA's figures for mma.m16n8k16 (f16/bf16 A, B; f32 C/D): lane 0 and lane 5 (group 1, t 1)
  a0, b0, c0 = mma_fragment_layout(0)
  assert a0 == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]
  assert b0 == [(0, 0), (1, 0), (8, 0), (9, 0)] and c0 == [(0, 0), (0, 1), (8, 0), (8, 1)]
  a5, b5, c5 = mma_fragment_layout(5)
  assert a5[0] == (1, 2) and a5[7] == (9, 11) and b5 == [(2, 1), (3, 1), (10, 1), (11, 1)]
  assert c5 == [(1, 2), (1, 3), (9, 2), (9, 3)]
  # every element of each tile is held by exactly one (lane, register)
  for which, n in ((0, 16 * 16), (1, 16 * 8), (2, 16 * 8)):
    cells = [rc for lane in range(32) for rc in mma_fragment_layout(lane)[which]]
    assert len(cells) == len(set(cells)) == n

def test_lowerer_fragments_agree_with_the_emulator() -> None:
  lane = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("lane", 0, 31))
  for which, frags in enumerate(lowerer.tc_fragments(lane)):
    for lv in range(32):
      got = [tuple(x.substitute({lane: UOp.const(dtypes.int32, lv)}).simplify().arg for x in rc) for rc in frags]
      assert got == mma_fragment_layout(lv)[which], (which, lv)

@pytest.mark.parametrize("d", [dtypes.float16, dtypes.bfloat16])
def test_emulated_mma_is_a_matmul(d) -> None:
  A, B, C = _as_f32(_rand(16, 16), d), _as_f32(_rand(16, 8, seed=1), d), _rand(16, 8, seed=2)
  frag = lambda M, w: [tuple(float(M[r, c]) for r, c in mma_fragment_layout(lane)[w]) for lane in range(32)]  # noqa: E731
  out = mma_m16n8k16(frag(A, 0) * 2, frag(B, 1) * 2, frag(C, 2) * 2, d)  # two warps
  D = np.zeros((16, 8), np.float32)
  for lane in range(32):
    for (r, c), x in zip(mma_fragment_layout(lane)[2], out[lane]): D[r, c] = x
  np.testing.assert_allclose(D, A @ B + C, rtol=1e-5, atol=1e-5)
  assert out[32:] == out[:32]

def test_emulated_shuffle_stays_in_its_warp() -> None:
  assert shuffle_xor(list(range(64)), 16)[:4] == [16, 17, 18, 19] and shuffle_xor(list(range(64)), 1)[32] == 33
  with pytest.raises(RuntimeError, match="whole warps"): shuffle_xor(list(range(48)), 1)

# ***** matmuls through the CUDA lowering, run by the emulator *****

@pytest.mark.parametrize("d", [dtypes.float16, dtypes.bfloat16])
@pytest.mark.parametrize("shape, tiles", [((16, 16, 8), 1), ((32, 48, 16), 4), ((48, 32, 24), 1), ((32, 32, 64), 8)])
def test_tc_matmul_matches_numpy(d, shape: tuple[int, int, int], tiles: int) -> None:
  m, k, n = shape
  a, b = _rand(m, k), _rand(k, n, seed=1)
  out, (sp,) = emulate(_low(a, d) @ _low(b, d))
  assert sp.applied_opts[0] == Opt("TC", 0, 0) and sp.local_size == (32,)
  # the heuristic gives each warp up to 2x4 tiles (UPCAST of the tile counts)
  assert sum(u.op is Ops.WMMA for u in sp.uops) == tiles and not any(u.op is Ops.DEFINE_LOCAL for u in sp.uops)
  ref = _as_f32(a, d) @ _as_f32(b, d)
  np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2e-2 if d is dtypes.bfloat16 else 2e-3, atol=3e-2)

def test_tc_batched_transposed_and_fused_epilogue() -> None:
  a, b, bias = _rand(2, 32, 16), _rand(2, 24, 32, seed=1), _rand(24, seed=2)
  h = lambda x: _low(x, dtypes.float16)  # noqa: E731
  t = ((h(a).transpose(1, 2) @ h(b).transpose(1, 2)).float() + Tensor(bias)).relu()  # A and B both column-major
  out, specs = emulate(t)
  assert specs[-1].applied_opts[0].op == "TC" and len(specs) == 1
  ah, bh = _as_f32(a, dtypes.float16), _as_f32(b, dtypes.float16)
  ref = np.maximum(ah.transpose(0, 2, 1) @ bh.transpose(0, 2, 1) + bias, 0)
  np.testing.assert_allclose(out, ref, rtol=2e-3, atol=2e-2)

def test_tc_accumulates_in_float32() -> None:
  # 1024 ones of 1 + 2^-10: a half accumulator stalls at 2048, the float32 one gets every step
  a = np.full((16, 2048), 1 + 2**-10, np.float32)
  out, _ = emulate((_low(a, dtypes.float16) @ _low(np.ones((2048, 8), np.float32), dtypes.float16)).float())
  np.testing.assert_allclose(out, np.full((16, 8), 2048 * (1 + 2**-10)), rtol=1e-3)

def test_a_wrong_fragment_layout_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
  """The check has teeth: B's registers 2 and 3 swapped with 0 and 1 in the lowering give wrong numbers."""
  real = lowerer.tc_fragments
  def wrong(lane: UOp):
    a, b, c = real(lane)
    return a, b[2:] + b[:2], c
  monkeypatch.setattr(lowerer, "tc_fragments", wrong)
  a, b = _rand(16, 16), _rand(16, 8, seed=1)
  out, _ = emulate(_low(a, dtypes.float16) @ _low(b, dtypes.float16))
  assert not np.allclose(out.astype(np.float32), _as_f32(a, dtypes.float16) @ _as_f32(b, dtypes.float16), atol=0.1)

@pytest.mark.parametrize("shape, d", [((17, 16, 8), dtypes.float16), ((16, 40, 8), dtypes.float16),
                                      ((16, 16, 8), dtypes.float32)])
def test_no_tc_when_tiles_or_dtype_dont_fit(shape: tuple[int, int, int], d) -> None:
  m, k, n = shape
  a, b = _rand(m, k), _rand(k, n, seed=1)
  out, (sp,) = emulate(_low(a, d) @ _low(b, d))
  assert all(o.op != "TC" for o in sp.applied_opts) and not any(u.op is Ops.WMMA for u in sp.uops)
  np.testing.assert_allclose(out.astype(np.float32), _as_f32(a, d) @ _as_f32(b, d), rtol=1e-2, atol=5e-2)

def _kernel(t: Tensor, **kw) -> Kernel:
  (si,) = [si for si in create_schedule([t.uop])[0] if si.ast.op is Ops.SINK]
  return new_kernel(si.ast, **kw)

def test_bad_tc_opts_say_why() -> None:
  h = _low(_rand(32, 32), dtypes.float16)
  tcs = {"tensor_cores": (dtypes.float16, dtypes.bfloat16)}
  with pytest.raises(ValueError, match="no tensor cores for dtypes.half"): _kernel(h @ h).apply_opt(Opt("TC", 0, 0))
  with pytest.raises(ValueError, match="no tensor cores for dtypes.float"):
    _kernel(Tensor(_rand(32, 32)) @ Tensor(_rand(32, 32)), **tcs).apply_opt(Opt("TC", 0, 0))
  with pytest.raises(ValueError, match="not one sum of products"):
    _kernel(h.sum(axis=1), **tcs).apply_opt(Opt("TC", 0, 0))
  k = _kernel(h @ h, **tcs)
  k.apply_opt(Opt("LOCAL", 0, 4))
  with pytest.raises(ValueError, match="first action"): k.apply_opt(Opt("TC", 0, 0))
  k = _kernel(h @ h, **tcs)
  k.apply_opt(Opt("TC", 0, 0))
  assert k.full_shape == (2, 16, 4, 8, 2, 16) and k.first_reduce == 4
  with pytest.raises(ValueError, match="after TC only UPCAST"): k.apply_opt(Opt("UPCAST", 1, 2))  # inside the tile
  with pytest.raises(ValueError, match="after TC only UPCAST"): k.apply_opt(Opt("LOCAL", 0, 2))
  k.apply_opt(Opt("UPCAST", 2, 4))  # 4 n-tiles per warp
  assert k.tc is not None and (k.tc.m, k.tc.n, k.tc.k) == (1, 4, 6) and k.upcasted == [3]
  with pytest.raises(ValueError, match="GPU renderer"): lowerer.lower(k, gpu=False)
  with pytest.raises(ValueError, match="no tensor cores"): get_program(k.ast, ClangRenderer(), [Opt("TC", 0, 0)])

def test_tc_explicit_tiles_per_warp() -> None:
  a, b = _rand(32, 32), _rand(32, 16, seed=1)
  h = lambda x: _low(x, dtypes.float16)  # noqa: E731
  out, (sp,) = emulate(h(a) @ h(b), [Opt("TC", 0, 0), Opt("UPCAST", 0, 2), Opt("UPCAST", 3, 2)])
  assert sum(u.op is Ops.WMMA for u in sp.uops) == 4 and sp.global_size == (1,)
  np.testing.assert_allclose(out.astype(np.float32), _as_f32(a, dtypes.float16) @ _as_f32(b, dtypes.float16),
                             rtol=2e-3, atol=3e-2)

# ***** reductions: warp shuffles, and local memory where a group is not whole warps *****

@pytest.mark.parametrize("opts, shuffles, smem", [([Opt("GROUPTOP", 1, 32)], 5, False),
                                                  ([Opt("GROUP", 1, 32)], 5, False),
                                                  ([Opt("GROUPTOP", 1, 128)], 5, True),
                                                  ([Opt("LOCAL", 0, 2), Opt("GROUP", 2, 64)], 5, True),
                                                  ([Opt("GROUP", 1, 16)], 0, True)])
def test_group_reductions_match_numpy(opts: list[Opt], shuffles: int, smem: bool) -> None:
  x = _rand(4, 512)
  t = Tensor(x)
  for op, ref in (("sum", x.sum(axis=1)), ("max", x.max(axis=1))):
    out, (sp,) = emulate(getattr(t, op)(axis=1), opts)
    assert sum(u.op is Ops.SHUFFLE for u in sp.uops) == shuffles
    assert any(u.op is Ops.DEFINE_LOCAL for u in sp.uops) == smem
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)

def test_int_and_half_reductions_shuffle_exactly() -> None:
  xi = (np.arange(8 * 256) % 97 - 40).reshape(8, 256).astype(np.int32)
  out, _ = emulate(Tensor(xi).sum(axis=1), [Opt("GROUPTOP", 1, 64)])
  np.testing.assert_array_equal(out, xi.sum(axis=1))
  xh = _rand(8, 256)
  out, _ = emulate(_low(xh, dtypes.float16).max(axis=1), [Opt("GROUP", 1, 32)])
  np.testing.assert_array_equal(out, xh.astype(np.float16).max(axis=1))

def test_without_shuffles_groups_use_local_memory(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(PythonGPURenderer, "warp_size", 0)
  x = _rand(4, 512)
  out, (sp,) = emulate(Tensor(x).sum(axis=1), [Opt("GROUPTOP", 1, 32)])
  assert not any(u.op is Ops.SHUFFLE for u in sp.uops) and any(u.op is Ops.BARRIER for u in sp.uops)
  np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5, atol=1e-4)

def test_heuristic_kernels_of_a_small_model_on_the_emulator() -> None:
  x, w = _rand(16, 64), _rand(64, 32, seed=1)
  out, specs = emulate((Tensor(x) @ Tensor(w)).relu().sum(axis=1))
  np.testing.assert_allclose(out, np.maximum(x @ w, 0).sum(axis=1), rtol=1e-4, atol=1e-3)

def test_python_gpu_env_runs_tensors_through_the_cuda_lowering() -> None:
  """PYTHON_GPU=1: the PYTHON device itself lowers like CUDA, so plain Tensor code runs on tensor cores, emulated."""
  code = ("import numpy as np\nfrom attograd import Tensor\nfrom attograd.engine import realize\n"
          "a, b = np.random.default_rng(0).standard_normal((2, 32, 32)).astype(np.float16)\n"
          "out = (Tensor(a) @ Tensor(b)).numpy()\n"
          "assert np.allclose(out, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=5e-2)\n"
          "print(sorted({o.op for r in realize._runners.values() for o in r.spec.applied_opts}))\n")
  env = {**os.environ, "PYTHON_GPU": "1", "DEV": "PYTHON", "PYTHONPATH": os.getcwd()}
  p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
  assert p.returncode == 0, p.stderr
  assert "'TC'" in p.stdout
