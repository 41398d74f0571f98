"""The METAL device: Apple GPUs. Kernels render as Metal Shading Language (renderer/cstyle.py MetalRenderer); this
version has no Metal runtime, so the device only explains why it can't start."""
from __future__ import annotations
import sys
from attograd.device import Compiled, DeviceUnavailable

class MetalDevice(Compiled):
  def __init__(self, device: str):
    if sys.platform != "darwin":
      raise DeviceUnavailable(f"METAL: needs macOS (Apple's Metal framework); this is {sys.platform}. Use DEV=CL, "
                              "DEV=CUDA or DEV=CPU here.")
    raise DeviceUnavailable("METAL: this version of attograd renders Metal kernels (MetalRenderer) but has no Metal "
                            "runtime yet; use DEV=CPU on macOS.")
