"""The CUDA device: the driver API (libcuda) through ctypes, kernels compiled to PTX by NVRTC (libnvrtc), or by
`nvcc --ptx` when NVRTC is missing. "CUDA:1" is the second GPU."""
from __future__ import annotations
import ctypes, ctypes.util, glob, os, shutil, subprocess, tempfile
from attograd.device import Compiled, Compiler, DeviceUnavailable, LRUAllocator, host_bytes, var_ctypes
from attograd.dtype import DType
from attograd.renderer.cstyle import CUDARenderer

c_p, c_int, c_uint, c_size = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 75, 76

def _try_load(names: list[str]) -> ctypes.CDLL | None:
  for n in names:
    try: return ctypes.CDLL(n)
    except OSError: continue
  return None

_cuda: ctypes.CDLL | None = None
def cuda() -> ctypes.CDLL:
  """libcuda, the driver API, with the signatures we use declared once."""
  global _cuda
  if _cuda is not None: return _cuda
  lib = _try_load([n for n in (ctypes.util.find_library("cuda"), "libcuda.so.1", "libcuda.so") if n])
  if lib is None:
    raise DeviceUnavailable("CUDA: libcuda.so (the NVIDIA driver) was not found. It comes with the NVIDIA driver, not "
                            "the CUDA toolkit; on a machine without an NVIDIA GPU use DEV=CL or DEV=CPU.")
  P = ctypes.POINTER
  sigs = {
    "cuInit": [c_uint], "cuDeviceGetCount": [P(c_int)], "cuDeviceGet": [P(c_int), c_int],
    "cuDeviceGetAttribute": [P(c_int), c_int, c_int], "cuDeviceGetName": [ctypes.c_char_p, c_int, c_int],
    "cuCtxCreate_v2": [P(c_p), c_uint, c_int], "cuCtxSetCurrent": [c_p], "cuCtxSynchronize": [],
    "cuMemAlloc_v2": [P(ctypes.c_uint64), c_size], "cuMemFree_v2": [ctypes.c_uint64],
    "cuMemcpyHtoD_v2": [ctypes.c_uint64, c_p, c_size], "cuMemcpyDtoH_v2": [c_p, ctypes.c_uint64, c_size],
    "cuModuleLoadData": [P(c_p), c_p], "cuModuleGetFunction": [P(c_p), c_p, ctypes.c_char_p],
    "cuModuleUnload": [c_p],
    "cuLaunchKernel": [c_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_p, P(c_p), P(c_p)],
    "cuStreamCreate": [P(c_p), c_uint], "cuStreamSynchronize": [c_p],
    "cuEventCreate": [P(c_p), c_uint], "cuEventRecord": [c_p, c_p], "cuEventSynchronize": [c_p],
    "cuEventElapsedTime": [P(ctypes.c_float), c_p, c_p], "cuEventDestroy_v2": [c_p],
    "cuGetErrorString": [c_int, P(ctypes.c_char_p)],
  }
  for name, args in sigs.items():
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = c_int, args
  _cuda = lib
  return lib

def check(status: int, what: str) -> None:
  if status != 0:
    msg = ctypes.c_char_p()
    cuda().cuGetErrorString(status, ctypes.byref(msg))
    raise RuntimeError(f"CUDA: {what} failed: error {status} ({(msg.value or b'?').decode()})")

def cuda_include_dirs() -> list[str]:
  """Where cuda_fp16.h lives, for NVRTC (nvcc finds it by itself)."""
  roots = [os.getenv("CUDA_HOME", ""), os.getenv("CUDA_PATH", ""), "/usr/local/cuda"]
  roots += sorted(glob.glob("/usr/local/cuda-*"))
  return [os.path.join(r, "include") for r in roots if r and os.path.exists(os.path.join(r, "include", "cuda_fp16.h"))]

class NVRTCCompiler(Compiler):
  """CUDA C -> PTX text for one GPU architecture (e.g. sm_80), by NVRTC, else by `nvcc --ptx`."""
  def __init__(self, arch: str):
    self.arch = arch
    self.nvrtc = _try_load([n for n in (ctypes.util.find_library("nvrtc"), "libnvrtc.so", "libnvrtc.so.13",
                                        "libnvrtc.so.12", "libnvrtc.so.11.2") if n])
    default_nvcc = "/usr/local/cuda/bin/nvcc"
    self.nvcc = shutil.which("nvcc") or (default_nvcc if os.path.exists(default_nvcc) else None)
    if self.nvrtc is None and self.nvcc is None:
      raise DeviceUnavailable("CUDA: neither libnvrtc.so nor nvcc was found to compile kernels. Install the CUDA "
                              "toolkit "
                              "(or just its NVRTC library, e.g. `pip install nvidia-cuda-nvrtc-cu12`).")
    self.cachekey = f"cuda:{arch}:{'nvrtc' if self.nvrtc is not None else 'nvcc'}:nofmad"
  def compile(self, src: str) -> bytes: return self._nvrtc(src) if self.nvrtc is not None else self._nvcc(src)
  def _nvrtc(self, src: str) -> bytes:
    lib, prog = self.nvrtc, c_p()
    assert lib is not None
    def ok(status: int, what: str) -> None:
      if status != 0: raise RuntimeError(f"CUDA: NVRTC {what} failed with status {status}")
    ok(lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None), "nvrtcCreateProgram")
    # --fmad=false: the code generator writes the fused multiply-adds itself (codegen/fma.py), so an expression rounds
    # the same in every kernel; ptxas would otherwise fuse a*b+c wherever it sees one
    opts = [f"--gpu-architecture={self.arch.replace('sm_', 'compute_')}".encode(), b"-default-device", b"--fmad=false"]
    opts += [f"-I{d}".encode() for d in cuda_include_dirs()]
    status = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    if status != 0:
      size = c_size()
      lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
      log = ctypes.create_string_buffer(size.value)
      lib.nvrtcGetProgramLog(prog, log)
      lib.nvrtcDestroyProgram(ctypes.byref(prog))
      raise RuntimeError(f"CUDA: NVRTC failed to compile:\n{log.value.decode(errors='replace')}\n--- source ---\n{src}")
    size = c_size()
    ok(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
    ptx = ctypes.create_string_buffer(size.value)
    ok(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.raw.rstrip(b"\0") + b"\0"
  def _nvcc(self, src: str) -> bytes:
    assert self.nvcc is not None
    with tempfile.TemporaryDirectory() as d:
      cu, ptx = os.path.join(d, "kernel.cu"), os.path.join(d, "kernel.ptx")
      with open(cu, "w") as f: f.write(src)
      p = subprocess.run([self.nvcc, "--ptx", f"-arch={self.arch}", "--fmad=false", cu, "-o", ptx],
                         capture_output=True, text=True)
      if p.returncode != 0: raise RuntimeError(f"CUDA: nvcc failed to compile:\n{p.stderr}\n--- source ---\n{src}")
      with open(ptx, "rb") as f: return f.read() + b"\0"

class CUDAAllocator(LRUAllocator):
  """A buffer is a device address. Copies go through the default stream after our stream has finished."""
  def __init__(self, dev: CudaDevice):
    super().__init__()
    self.dev = dev
  def _alloc(self, nbytes: int) -> int:
    ptr = ctypes.c_uint64()
    cuda().cuCtxSetCurrent(self.dev.ctx)
    if cuda().cuMemAlloc_v2(ctypes.byref(ptr), nbytes) != 0:
      raise MemoryError(f"CUDA: could not allocate {nbytes} bytes")
    return ptr.value
  def _free(self, buf: int, nbytes: int) -> None: cuda().cuMemFree_v2(buf)
  def offset_handle(self, buf: int, nbytes: int, offset: int) -> int: return buf + offset  # (a device address)
  def copyin(self, dest: int, src: memoryview) -> None:
    self.dev.synchronize()
    host = host_bytes(src)
    check(cuda().cuMemcpyHtoD_v2(dest, ctypes.addressof(host), src.nbytes), "copy in")
  def copyout(self, dest: memoryview, src: int) -> None:
    self.dev.synchronize()
    host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
    check(cuda().cuMemcpyDtoH_v2(ctypes.addressof(host), src, dest.nbytes), "copy out")

class CUDAProgram:
  """One kernel from PTX; call with device addresses, launch sizes and int variable values."""
  # the Variables' dtypes, set by the runner where one is int64 (passed as 64 bits); () means all int32
  var_dtypes: tuple[DType, ...] = ()
  def __init__(self, dev: CudaDevice, name: str, lib: bytes):
    self.dev, self.name, self.module, self.fxn = dev, name, c_p(), c_p()
    check(cuda().cuModuleLoadData(ctypes.byref(self.module), lib), f"loading the PTX of {name}")
    check(cuda().cuModuleGetFunction(ctypes.byref(self.fxn), self.module, name.encode()), f"finding {name}")
  def __call__(self, *bufs: int, global_size: tuple[int, ...] = (1,), local_size: tuple[int, ...] | None = None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    g = tuple(global_size) + (1,) * (3 - len(global_size))
    b = tuple(local_size or ()) + (1,) * (3 - len(local_size or ()))
    args = [ctypes.c_uint64(x) for x in bufs] + [ct(v) for v, ct in zip(vals, var_ctypes(self.var_dtypes, len(vals)))]
    params = (c_p * len(args))(*[ctypes.addressof(a) for a in args])
    lib = cuda()
    lib.cuCtxSetCurrent(self.dev.ctx)
    if wait:
      start, end = c_p(), c_p()
      lib.cuEventCreate(ctypes.byref(start), 0)
      lib.cuEventCreate(ctypes.byref(end), 0)
      lib.cuEventRecord(start, self.dev.stream)
    check(lib.cuLaunchKernel(self.fxn, *g, *b, 0, self.dev.stream, params, None),
          f"launching {self.name} grid {g} block {b}")
    if not wait: return None
    lib.cuEventRecord(end, self.dev.stream)
    check(lib.cuEventSynchronize(end), "waiting for the kernel")
    ms = ctypes.c_float()
    lib.cuEventElapsedTime(ctypes.byref(ms), start, end)
    lib.cuEventDestroy_v2(start)
    lib.cuEventDestroy_v2(end)
    return ms.value * 1e-3

class CudaDevice(Compiled):
  def __init__(self, device: str):
    lib = cuda()
    status = lib.cuInit(0)
    if status != 0: raise DeviceUnavailable(f"CUDA: cuInit failed with error {status}: the driver found no usable GPU")
    n = c_int()
    check(lib.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    num = int(device.split(":")[1]) if ":" in device else 0
    if num >= n.value: raise DeviceUnavailable(f"CUDA: {device} asks for GPU {num}, but this machine has {n.value}")
    self.dev_id, self.ctx, self.stream = c_int(), c_p(), c_p()
    check(lib.cuDeviceGet(ctypes.byref(self.dev_id), num), "cuDeviceGet")
    major, minor = c_int(), c_int()
    lib.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev_id)
    lib.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev_id)
    check(lib.cuCtxCreate_v2(ctypes.byref(self.ctx), 0, self.dev_id), "cuCtxCreate")
    check(lib.cuStreamCreate(ctypes.byref(self.stream), 0), "cuStreamCreate")
    arch = f"sm_{major.value}{minor.value}"
    super().__init__(device, CUDAAllocator(self), CUDARenderer(device, arch), NVRTCCompiler(arch),
                     lambda name, lib: CUDAProgram(self, name, lib))
  def synchronize(self) -> None:
    check(cuda().cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
    check(cuda().cuStreamSynchronize(self.stream), "cuStreamSynchronize")
