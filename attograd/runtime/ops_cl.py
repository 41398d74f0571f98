"""The CL device: OpenCL through ctypes on the system's libOpenCL (any ICD: PoCL, NVIDIA, AMD, Intel).
"CL" is the first device of all platforms, "CL:1" the second. Programs are cached on disk as device binaries.
A program is released when its runner leaves the runner cache; PoCL keeps the kernel's library loaded regardless
(4 memory mappings each, two libraries per kernel unless POCL_WORK_GROUP_SPECIALIZATION=0), so a process that builds
tens of thousands of distinct kernels on PoCL can reach the limit of 65530 mappings (vm.max_map_count)."""
from __future__ import annotations
import ctypes, ctypes.util, os
from typing import Any
from attograd.device import Compiled, Compiler, DeviceUnavailable, LRUAllocator, host_bytes, var_ctypes
from attograd.dtype import DType
from attograd.helpers import cache_dir
from attograd.renderer.cstyle import OpenCLRenderer

# PoCL compiles each kernel with clang in a work directory (set before the library loads). Its own kernel cache is off:
# attograd's disk cache already keeps each program's binary, and PoCL's, shared by every process, races: a process
# that finds another's half-written entry returns a program binary without kernel metadata, and loading that binary
# later aborts the interpreter (PoCL's assertion `len > 0` in pocl_binary_get_kernels_metadata).
os.environ.setdefault("POCL_CACHE_DIR", os.path.join(cache_dir(), "pocl"))
os.environ.setdefault("POCL_KERNEL_CACHE", "0")

c_p, c_int, c_uint, c_size, c_ulong = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_uint64
CL_DEVICE_TYPE_ALL, CL_MEM_READ_WRITE, CL_QUEUE_PROFILING_ENABLE, CL_QUEUE_PROPERTIES = 0xFFFFFFFF, 1, 2, 0x1093
CL_DEVICE_NAME, CL_DEVICE_VERSION, CL_DRIVER_VERSION, CL_DEVICE_EXTENSIONS = 0x102B, 0x102F, 0x102D, 0x1030
CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_PLATFORM_NAME, CL_PROGRAM_BUILD_LOG = 0x1004, 0x0902, 0x1183
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES = 0x1165, 0x1166
CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END = 0x1282, 0x1283
CL_DEVICE_MEM_BASE_ADDR_ALIGN, CL_BUFFER_CREATE_TYPE_REGION = 0x1019, 0x1220

def _load_lib() -> ctypes.CDLL:
  names = [n for n in (ctypes.util.find_library("OpenCL"), "libOpenCL.so.1", "libOpenCL.so") if n]
  for n in names:
    try: return ctypes.CDLL(n)
    except OSError: continue
  raise DeviceUnavailable("CL: libOpenCL.so was not found. Install an OpenCL loader and driver, e.g. "
                          "`apt-get install ocl-icd-libopencl1 pocl-opencl-icd` (PoCL runs OpenCL on the CPU).")

_lib: ctypes.CDLL | None = None
def cl() -> ctypes.CDLL:
  """The library, with the signatures we use declared once."""
  global _lib
  if _lib is not None: return _lib
  lib = _load_lib()
  P, I = ctypes.POINTER, c_int
  sigs = {
    "clGetPlatformIDs": (I, [c_uint, P(c_p), P(c_uint)]),
    "clGetPlatformInfo": (I, [c_p, c_uint, c_size, c_p, P(c_size)]),
    "clGetDeviceIDs": (I, [c_p, c_ulong, c_uint, P(c_p), P(c_uint)]),
    "clGetDeviceInfo": (I, [c_p, c_uint, c_size, c_p, P(c_size)]),
    "clCreateContext": (c_p, [c_p, c_uint, P(c_p), c_p, c_p, P(I)]),
    "clCreateCommandQueue": (c_p, [c_p, c_p, c_ulong, P(I)]),
    "clCreateBuffer": (c_p, [c_p, c_ulong, c_size, c_p, P(I)]),
    "clReleaseMemObject": (I, [c_p]),
    "clCreateSubBuffer": (c_p, [c_p, c_ulong, c_uint, c_p, P(I)]),
    "clEnqueueWriteBuffer": (I, [c_p, c_p, c_uint, c_size, c_size, c_p, c_uint, c_p, c_p]),
    "clEnqueueReadBuffer": (I, [c_p, c_p, c_uint, c_size, c_size, c_p, c_uint, c_p, c_p]),
    "clCreateProgramWithSource": (c_p, [c_p, c_uint, P(ctypes.c_char_p), P(c_size), P(I)]),
    "clCreateProgramWithBinary": (c_p, [c_p, c_uint, P(c_p), P(c_size), P(c_p), P(I), P(I)]),
    "clBuildProgram": (I, [c_p, c_uint, P(c_p), ctypes.c_char_p, c_p, c_p]),
    "clGetProgramBuildInfo": (I, [c_p, c_p, c_uint, c_size, c_p, P(c_size)]),
    "clGetProgramInfo": (I, [c_p, c_uint, c_size, c_p, P(c_size)]),
    "clReleaseProgram": (I, [c_p]),
    "clCreateKernel": (c_p, [c_p, ctypes.c_char_p, P(I)]),
    "clReleaseKernel": (I, [c_p]),
    "clSetKernelArg": (I, [c_p, c_uint, c_size, c_p]),
    "clEnqueueNDRangeKernel": (I, [c_p, c_p, c_uint, P(c_size), P(c_size), P(c_size), c_uint, c_p, P(c_p)]),
    "clWaitForEvents": (I, [c_uint, P(c_p)]),
    "clGetEventProfilingInfo": (I, [c_p, c_uint, c_size, c_p, P(c_size)]),
    "clReleaseEvent": (I, [c_p]),
    "clFinish": (I, [c_p]),
  }
  for name, (res, args) in sigs.items():
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = res, args
  if hasattr(lib, "clCreateCommandQueueWithProperties"):  # OpenCL 2.0+; the 1.x call is deprecated there
    lib.clCreateCommandQueueWithProperties.restype = c_p
    lib.clCreateCommandQueueWithProperties.argtypes = [c_p, c_p, P(c_ulong), P(I)]
  _lib = lib
  return lib

def check(status: int, what: str) -> None:
  if status != 0: raise RuntimeError(f"CL: {what} failed with OpenCL error {status}")

def _info_str(fn: Any, obj: int, param: int) -> str:
  size = c_size()
  check(fn(obj, param, 0, None, ctypes.byref(size)), "get info")
  buf = ctypes.create_string_buffer(size.value)
  check(fn(obj, param, size.value, buf, None), "get info")
  return buf.value.decode(errors="replace")

def list_devices() -> list[tuple[int, int]]:
  """(platform, device) of every OpenCL device, platforms in the loader's order."""
  lib = cl()
  n = c_uint()
  status = lib.clGetPlatformIDs(0, None, ctypes.byref(n))
  if status != 0 or n.value == 0:
    raise DeviceUnavailable(f"CL: libOpenCL loaded but no OpenCL platform is installed (error {status}). Install a "
                            "driver (ICD), e.g. `apt-get install pocl-opencl-icd`, and check with `clinfo -l`.")
  plats = (c_p * n.value)()
  check(lib.clGetPlatformIDs(n.value, plats, None), "clGetPlatformIDs")
  out: list[tuple[int, int]] = []
  for p in plats:
    nd = c_uint()
    if lib.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(nd)) != 0 or nd.value == 0: continue
    devs = (c_p * nd.value)()
    check(lib.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd.value, devs, None), "clGetDeviceIDs")
    out.extend((p, d) for d in devs)  # type: ignore[misc]  # ctypes arrays of c_void_p read as ints
  return out

class CLAllocator(LRUAllocator):
  """A buffer is a cl_mem handle. Copies block; kernels run in order on one queue, so reads see earlier writes."""
  def __init__(self, dev: ClDevice):
    super().__init__()
    self.dev = dev
  def _alloc(self, nbytes: int) -> int:
    err = c_int()
    mem = cl().clCreateBuffer(self.dev.ctx, CL_MEM_READ_WRITE, nbytes, None, ctypes.byref(err))
    if err.value != 0 or not mem:
      raise MemoryError(f"CL: could not allocate {nbytes} bytes on {self.dev.name} (error {err.value})")
    return mem
  def _free(self, buf: int, nbytes: int) -> None: cl().clReleaseMemObject(buf)
  def offset_handle(self, buf: int, nbytes: int, offset: int) -> int:
    """A sub-buffer: OpenCL requires its first byte at a multiple of the device's base address alignment."""
    if offset % (align := self.dev.base_align):
      raise RuntimeError(f"CL: a view must start at a multiple of {align} bytes on {self.dev.name} (OpenCL's "
                         f"sub-buffer alignment), not at byte {offset}")
    err, region = c_int(), (c_size * 2)(offset, max(nbytes, 1))
    mem = cl().clCreateSubBuffer(buf, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, region, ctypes.byref(err))
    check(err.value, "clCreateSubBuffer")
    return mem
  def free_view(self, handle: int) -> None: cl().clReleaseMemObject(handle)
  def copyin(self, dest: int, src: memoryview) -> None:
    host = host_bytes(src)
    check(cl().clEnqueueWriteBuffer(self.dev.queue, dest, 1, 0, src.nbytes, ctypes.addressof(host), 0, None, None),
          "copy in")
  def copyout(self, dest: memoryview, src: int) -> None:
    host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
    check(cl().clEnqueueReadBuffer(self.dev.queue, src, 1, 0, dest.nbytes, ctypes.addressof(host), 0, None, None),
          "copy out")

class CLCompiler(Compiler):
  """OpenCL C -> the device's program binary (for PoCL, and for most GPU drivers, loadable again later)."""
  def __init__(self, dev: ClDevice):
    self.dev = dev
    # CL_BUILD_OPTS=-cl-opt-disable builds ~3x faster on PoCL (slower kernels): worth it for a cold test run
    self.options = os.getenv("CL_BUILD_OPTS", "")
    self.cachekey = f"cl:{dev.device_name}:{dev.driver_version}:{self.options}"
  def build(self, prg: int, src: str) -> None:
    lib = cl()
    status = lib.clBuildProgram(prg, 1, ctypes.byref(c_p(self.dev.device_id)), self.options.encode(), None, None)
    if status != 0:
      def build_info(o: int, p: int, s: int, v: object, r: object) -> int:
        return lib.clGetProgramBuildInfo(o, self.dev.device_id, p, s, v, r)
      log = _info_str(build_info, prg, CL_PROGRAM_BUILD_LOG)
      lib.clReleaseProgram(prg)
      raise RuntimeError(f"CL: building the program failed (error {status}):\n{log}\n--- source ---\n{src}")
  def compile(self, src: str) -> bytes:
    lib = cl()
    err = c_int()
    raw = src.encode()
    prg = lib.clCreateProgramWithSource(self.dev.ctx, 1, (ctypes.c_char_p * 1)(raw), (c_size * 1)(len(raw)),
                                        ctypes.byref(err))
    check(err.value, "clCreateProgramWithSource")
    self.build(prg, src)
    size = c_size()
    check(lib.clGetProgramInfo(prg, CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(size), ctypes.byref(size), None), "sizes")
    binary = ctypes.create_string_buffer(size.value)
    where = c_p(ctypes.addressof(binary))
    check(lib.clGetProgramInfo(prg, CL_PROGRAM_BINARIES, ctypes.sizeof(c_p), ctypes.byref(where), None), "get binary")
    lib.clReleaseProgram(prg)
    return binary.raw

class CLProgram:
  """One kernel of a program binary; call with cl_mem buffers, launch sizes and int variable values."""
  # the Variables' dtypes, set by the runner where one is int64 (passed as 64 bits); () means all int32
  var_dtypes: tuple[DType, ...] = ()
  def __init__(self, dev: ClDevice, name: str, lib: bytes):
    self.dev, self.name, self.lib = dev, name, lib
    cl_, err, status = cl(), c_int(), c_int()
    binary = ctypes.create_string_buffer(lib, len(lib))
    self.prg = cl_.clCreateProgramWithBinary(dev.ctx, 1, ctypes.byref(c_p(dev.device_id)), (c_size * 1)(len(lib)),
                                             (c_p * 1)(ctypes.addressof(binary)), ctypes.byref(status),
                                             ctypes.byref(err))
    check(err.value or status.value, f"loading the binary of {name}")
    assert isinstance(dev.compiler, CLCompiler)
    dev.compiler.build(self.prg, f"<binary of {name}>")
    self.kernel = cl_.clCreateKernel(self.prg, name.encode(), ctypes.byref(err))
    check(err.value, f"clCreateKernel({name})")
  def __call__(self, *bufs: int, global_size: tuple[int, ...] = (1,), local_size: tuple[int, ...] | None = None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    lib = cl()
    for i, b in enumerate(bufs):
      check(lib.clSetKernelArg(self.kernel, i, ctypes.sizeof(c_p), ctypes.byref(c_p(b))), "set arg")
    for j, (v, ct) in enumerate(zip(vals, var_ctypes(self.var_dtypes, len(vals)))):
      check(lib.clSetKernelArg(self.kernel, len(bufs) + j, ctypes.sizeof(ct), ctypes.byref(ct(v))), "set arg")
    dims = max(len(global_size), len(local_size or ()))
    gs = tuple(global_size) + (1,) * (dims - len(global_size))
    local = tuple(local_size) + (1,) * (dims - len(local_size)) if local_size is not None else None
    glob = tuple(g * l for g, l in zip(gs, local)) if local is not None else gs  # NDRange counts threads, not groups
    event = c_p()
    check(lib.clEnqueueNDRangeKernel(self.dev.queue, self.kernel, len(glob), None, (c_size * len(glob))(*glob),
                                     (c_size * len(local))(*local) if local is not None else None, 0, None,
                                     ctypes.byref(event)), f"launching {self.name} with global {glob}, local {local}")
    try:
      if not wait: return None
      check(lib.clWaitForEvents(1, ctypes.byref(event)), "wait")
      start, end = c_ulong(), c_ulong()
      lib.clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_START, 8, ctypes.byref(start), None)
      lib.clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, 8, ctypes.byref(end), None)
      return (end.value - start.value) * 1e-9
    finally: lib.clReleaseEvent(event)
  def __del__(self) -> None:
    if getattr(self, "kernel", None) and _lib is not None:
      _lib.clReleaseKernel(self.kernel)
      _lib.clReleaseProgram(self.prg)

class ClDevice(Compiled):
  def __init__(self, device: str):
    devices = list_devices()
    num = int(device.split(":")[1]) if ":" in device else 0
    if not devices: raise DeviceUnavailable(f"CL: {device}: OpenCL found no device (see `clinfo -l`)")
    lib = cl()
    # CL:n past the last OpenCL device shares a device with CL:n-count, in a context (buffers, queue) of its own: it is
    # still a distinct attograd device, so multi-device code (shard, copies, all-reduce) runs on a one-device machine
    self.name, (self.platform, self.device_id) = device, devices[num % len(devices)]
    self.device_name = _info_str(lib.clGetDeviceInfo, self.device_id, CL_DEVICE_NAME)
    self.driver_version = _info_str(lib.clGetDeviceInfo, self.device_id, CL_DRIVER_VERSION)
    exts = _info_str(lib.clGetDeviceInfo, self.device_id, CL_DEVICE_EXTENSIONS).split()
    wg = c_size()
    check(lib.clGetDeviceInfo(self.device_id, CL_DEVICE_MAX_WORK_GROUP_SIZE, ctypes.sizeof(wg), ctypes.byref(wg), None),
          "device info")
    align = c_uint()  # (in bits)
    check(lib.clGetDeviceInfo(self.device_id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, ctypes.sizeof(align), ctypes.byref(align),
                              None), "device info")
    self.base_align = max(align.value // 8, 1)
    err = c_int()
    self.ctx = lib.clCreateContext(None, 1, ctypes.byref(c_p(self.device_id)), None, None, ctypes.byref(err))
    check(err.value, "clCreateContext")
    if hasattr(lib, "clCreateCommandQueueWithProperties"):
      props = (c_ulong * 3)(CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0)
      self.queue = lib.clCreateCommandQueueWithProperties(self.ctx, self.device_id, props, ctypes.byref(err))
    else: self.queue = lib.clCreateCommandQueue(self.ctx, self.device_id, CL_QUEUE_PROFILING_ENABLE, ctypes.byref(err))
    check(err.value, "creating the command queue")
    renderer = OpenCLRenderer(device, fp16="cl_khr_fp16" in exts, fp64="cl_khr_fp64" in exts,
                              local_max=min(wg.value, 256))
    self.compiler = CLCompiler(self)
    super().__init__(device, CLAllocator(self), renderer, self.compiler, lambda name, lib: CLProgram(self, name, lib))
  def synchronize(self) -> None: check(cl().clFinish(self.queue), "clFinish")
