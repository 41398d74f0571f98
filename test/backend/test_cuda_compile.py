"""CUDA codegen without a GPU: render the kernels of representative ops for CUDA and compile them to PTX with nvcc
(or NVRTC when its library is found), and to machine code (cubin, through ptxas) for sm_80 and sm_90 with nvcc.
Nothing runs here; the CL suite and the PYTHON GPU emulator (test_tensor_cores.py) check the same lowering's numbers."""
from __future__ import annotations
import re, shutil
import numpy as np
import pytest
from attograd.codegen import get_program
from attograd.codegen.kernel import Opt
from attograd.dtype import dtypes
from attograd.schedule import create_schedule
from attograd.renderer.cstyle import CUDARenderer
from attograd.tensor import Tensor
from attograd.uop.ops import Ops, Variable

R = CUDARenderer("CUDA", "sm_80")

def kernels(*ts: Tensor) -> list:
  """The kernel ASTs that realizing `ts` would run (on the CPU, where their inputs live)."""
  items, _ = create_schedule([t.uop for t in ts])
  return [si.ast for si in items if si.ast.op is Ops.SINK]

def _x(shape: tuple[int, ...], dtype=dtypes.float32) -> Tensor:
  return Tensor(np.arange(int(np.prod(shape))).reshape(shape) % 7 - 3).cast(dtype).realize()

def cases() -> list[tuple[str, list, list | None]]:
  """(name, kernel ASTs, explicit opts or None for the heuristic)."""
  out: list[tuple[str, list, list | None]] = []
  for d in (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.int8, dtypes.uint8, dtypes.int16,
            dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.bool, *dtypes.fp8s):
    a, b = _x((4, 33), d), _x((4, 33), d)
    if d is dtypes.bool: out.append((f"logic_{d.name}", kernels((a & b) | a.logical_not(), a.where(1.0, 2.0)), None))
    else:
      ew = kernels(a + b * a, (a < b).where(a, b), a.maximum(b), a.cast(dtypes.float32))
      out.append((f"elementwise_{d.name}", ew, None))
    if dtypes.is_float(d):
      math = kernels(a.exp(), a.log(), a.sin(), a.sqrt(), a.pow(b), a / b, a.isnan(), a.max(axis=1),
                     (a * float("inf")).sum())
      out.append((f"math_{d.name}", math, None))
  x = _x((64, 256))
  out += [("sum_rows", kernels(x.sum(axis=1)), None), ("sum_all", kernels(x.sum()), None),
          ("max_cols", kernels(x.max(axis=0)), None), ("softmax", kernels(x.softmax(axis=1)), None),
          ("argmax", kernels(x.argmax(axis=1)), None), ("mean_half", kernels(x.half().mean(axis=1)), None),
          ("matmul", kernels(_x((32, 64)) @ _x((64, 48))), None),
          ("matmul_bf16", kernels(_x((16, 32), dtypes.bfloat16) @ _x((32, 16), dtypes.bfloat16)), None),
          ("conv2d", kernels(_x((2, 3, 12, 12)).conv2d(_x((8, 3, 3, 3)), padding=1)), None),
          ("bitcast", kernels(_x((8,)).bitcast(dtypes.int32), _x((8,), dtypes.float16).bitcast(dtypes.int16)), None),
          ("random", kernels(Tensor.rand(4, 4, device="CPU")), None)]
  big = kernels(_x((16, 512)).sum(axis=1))
  out += [("local", kernels(_x((32, 64)).T * 2), [Opt("LOCAL", 1, 16), Opt("LOCAL", 0, 4)]),
          ("group", big, [Opt("GROUP", 1, 32)]), ("grouptop", big, [Opt("GROUPTOP", 1, 64)]),
          ("local_group", big, [Opt("LOCAL", 0, 4), Opt("GROUPTOP", 2, 16)]),
          ("local_upcast", kernels(_x((16, 64)).T + 1), [Opt("UPCAST", 1, 4), Opt("LOCAL", 0, 8)])]
  # tensor cores (the heuristic picks them for these) and warp shuffles (a group of one warp, and of 4 warps)
  h, hb = _x((32, 48), dtypes.float16), _x((48, 16), dtypes.float16)
  out += [("tc_half", kernels(h @ hb), None), ("tc_half_epilogue", kernels((h @ hb).relu() * 2), None),
          ("tc_bf16", kernels(_x((16, 32), dtypes.bfloat16) @ _x((32, 24), dtypes.bfloat16)), None),
          ("tc_half_batched", kernels(_x((2, 16, 32), dtypes.float16) @ _x((2, 32, 8), dtypes.float16)), None),
          ("shfl_warp", big, [Opt("GROUPTOP", 1, 32)]), ("shfl_4warps", big, [Opt("GROUP", 1, 128)]),
          ("shfl_local", big, [Opt("LOCAL", 0, 4), Opt("GROUP", 2, 64)]),
          ("shfl_half_max", kernels(_x((8, 512), dtypes.float16).max(axis=1)), [Opt("GROUPTOP", 1, 32)]),
          ("shfl_int64", kernels(_x((8, 512), dtypes.int64).sum(axis=1)), [Opt("GROUPTOP", 1, 64)])]
  # symbolic shapes: the Variable is a kernel argument and its axis a loop inside each thread
  bs = Variable("bs", 1, 64).bind(8)
  xs = _x((8, 33)).reshape(bs, 33)
  out += [("symbolic", kernels((xs * 2 + 1).sum(axis=0), xs.sum(axis=1), xs.softmax(axis=1)), None)]
  # a Variable with bounds past int32's is an int64 argument (next to an int32 one)
  n, k = Variable("n", 0, 2**40).bind(2**35), Variable("k", 0, 10).bind(3)
  out += [("symbolic_int64", kernels(_x((8,), dtypes.int64) + n, Tensor(n + k, device="CPU").clone()), None)]
  return out

def render_all() -> list[tuple[str, str, object]]:
  out = []
  for name, asts, opts in cases():
    for i, ast in enumerate(asts):
      spec = get_program(ast, R, opts)
      out.append((f"{name}_{i}", spec.src.replace(f" {spec.name}(", f" {name}_{i}("), spec))
  return out

def test_render_cuda_dialect() -> None:
  for name, src, spec in render_all():
    assert 'extern "C" __global__ void __launch_bounds__(' in src, name
    assert "for (int ridx0" not in src or spec.global_size == (1,) or name.startswith("symbolic"), \
      f"{name}: output axes should be threads\n{src}"
    if name.startswith("symbolic_int64"):
      assert "const long long n" in src and ("const int k" in src) == name.endswith("_1"), f"{name}\n{src}"
      assert [v.dtype for v in spec.vars if v.arg[0] == "n"] == [dtypes.int64], name
    elif name.startswith("symbolic"):
      assert "const int bs" in src and [v.arg[0] for v in spec.vars] == ["bs"], name
    assert spec.global_size is not None and spec.local_size is not None
    if "GROUP" in str(spec.applied_opts):  # whole warps on threadIdx.x shuffle first; a bigger group meets in memory
      g = next(o.amount for o in spec.applied_opts if o.op.startswith("GROUP"))
      assert (g % 32 == 0) == ("__shfl_xor_sync(0xffffffffu" in src), name
      assert (g != 32) == ("__shared__" in src and "__syncthreads();" in src), name
    if name.startswith("tc_"):
      assert spec.applied_opts[0].op == "TC" and spec.local_size == (32,) and "__atto_mma_" in src, name
    if "half" in src: assert "#include <cuda_fp16.h>" in src, name
    if "__nv_bfloat16" in src: assert "#include <cuda_bf16.h>" in src, name
    assert "NAN" not in src and "INFINITY" not in src, f"{name}: NVRTC has no math.h\n{src}"
    assert len(spec.local_size) <= 3 and len(spec.global_size) <= 3

def test_launch_dims_fold_past_three_axes() -> None:
  (ast,) = kernels(_x((2, 3, 5, 7, 11)).permute(4, 3, 2, 1, 0) + 1)
  spec = get_program(ast, R, [])
  assert len(spec.global_size) == 3 and np.prod(spec.global_size) == 2 * 3 * 5 * 7 * 11

def _compiler() -> tuple[str, str] | None:
  from attograd.runtime.ops_cuda import NVRTCCompiler
  try: c = NVRTCCompiler("sm_80")
  except Exception: return None
  return ("nvrtc", "") if c.nvrtc is not None else ("nvcc", c.nvcc or "")

@pytest.mark.skipif(_compiler() is None, reason="neither nvcc nor libnvrtc is installed")
def test_compile_to_ptx() -> None:
  """Every kernel in one translation unit (one nvcc run); each must come out as a PTX entry point."""
  from attograd.runtime.ops_cuda import NVRTCCompiler
  rendered = render_all()
  src = "\n".join(s for _, s, _ in rendered)
  ptx = NVRTCCompiler("sm_80").compile(src).decode()
  entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
  missing = [n for n, _, _ in rendered if n not in entries]
  assert not missing, f"no PTX entry for {missing}"
  assert "bar.sync" in ptx  # __syncthreads of the GROUP kernels

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_compile_error_has_log() -> None:
  from attograd.runtime.ops_cuda import NVRTCCompiler
  with pytest.raises(RuntimeError, match="not_a_type"):
    NVRTCCompiler("sm_80").compile('extern "C" __global__ void k() { not_a_type x; }')

def test_tc_needs_sm80_and_matching_sizes() -> None:
  (ast,) = kernels(_x((32, 48), dtypes.float16) @ _x((48, 16), dtypes.float16))
  assert get_program(ast, CUDARenderer("CUDA", "sm_75")).applied_opts[:1] != (Opt("TC", 0, 0),)  # no mma.m16n8k16
  (odd,) = kernels(_x((32, 40), dtypes.float16) @ _x((40, 16), dtypes.float16))  # k = 40: not a multiple of 16
  assert all(o.op != "TC" for o in get_program(odd, R).applied_opts)
  (f32,) = kernels(_x((32, 48)) @ _x((48, 16)))
  assert all(o.op != "TC" for o in get_program(f32, R).applied_opts)

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_tc_and_shuffles_to_cubin(arch: str, tmp_path) -> None:
  """Through ptxas to machine code: the inline mma.sync and its register constraints are checked by the assembler,
  which `--ptx` alone never runs."""
  import subprocess
  r = CUDARenderer("CUDA", arch)
  rendered = [(n, get_program(a, r, o)) for n, asts, o in cases() if n.startswith(("tc_", "shfl_")) for a in asts]
  src = "\n".join(sp.src.replace(f" {sp.name}(", f" {n}_{i}(") for i, (n, sp) in enumerate(rendered))
  (tmp_path / "k.cu").write_text(src)
  for flag, out in (("--ptx", "k.ptx"), ("-cubin", "k.cubin")):
    p = subprocess.run(["nvcc", flag, f"-arch={arch}", str(tmp_path / "k.cu"), "-o", str(tmp_path / out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
  ptx = (tmp_path / "k.ptx").read_text()
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
  assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
  assert "shfl.sync.bfly" in ptx
  assert (tmp_path / "k.cubin").stat().st_size > 0
