"""Golden tests of the Metal Shading Language renderer (there is no Metal runtime off macOS): the exact source for a
few kernels, read and checked by hand once. A change here is a change in what every Metal kernel looks like."""
# ruff: noqa: E501
from __future__ import annotations
import numpy as np
from attograd.codegen import get_program
from attograd.codegen.kernel import Opt
from attograd.device import Device
from attograd.dtype import dtypes
from attograd.schedule import create_schedule
from attograd.renderer.cstyle import MetalRenderer
from attograd.tensor import Tensor
from attograd.uop.ops import Ops

def _kernel(t: Tensor):
  (ast,) = [si.ast for si in create_schedule([t.uop])[0] if si.ast.op is Ops.SINK]
  return ast

ELEMENTWISE_LOCAL = """\
#include <metal_stdlib>
using namespace metal;
kernel void E_4_32(device float* data0 [[buffer(0)]], device float* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int lidx0 = lid.x; /* 32 */
  int gidx0 = gid.x; /* 4 */
  int alu0 = (gidx0*32);
  int alu1 = (alu0+lidx0);
  float val0 = data1[alu1];
  float alu2 = (val0*2.0f);
  float alu3 = (val0+alu2);
  data0[alu1] = alu3;
}
"""

SUM_GROUPTOP = """\
#include <metal_stdlib>
using namespace metal;
kernel void r_16_4_2(device float* data0 [[buffer(0)]], device float* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  threadgroup float temp1[4];
  int lidx0 = lid.x; /* 4 */
  bool alu0 = (lidx0==0);
  int alu1 = (lidx0*2);
  int gidx0 = gid.x; /* 16 */
  int alu2 = (gidx0*8);
  int alu3 = (alu2+alu1);
  float acc0 = 0.0f;
  float acc1 = 0.0f;
  for (int ridx2 = 0; ridx2 < 2; ridx2++) {
    int alu4 = (alu3+ridx2);
    float val0 = data1[alu4];
    float alu5 = (acc1+val0);
    acc1 = alu5;
  }
  temp1[lidx0] = acc1;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int ridx4 = 0; ridx4 < 4; ridx4++) {
    float val1 = temp1[ridx4];
    float alu6 = (acc0+val1);
    acc0 = alu6;
  }
  if (alu0) data0[gidx0] = acc0;
}
"""

HALF_WHERE_EXP_CAST = """\
#include <metal_stdlib>
using namespace metal;
kernel void E_128(device half* data0 [[buffer(0)]], device half* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 128 */
  half val0 = data1[gidx0];
  int alu0 = (int)(val0);
  half alu1 = (half)(alu0);
  float alu2 = (float)(alu1);
  float alu3 = (float)(val0);
  bool alu4 = (alu3<-110.0f);
  float alu5 = (alu4?-110.0f:alu3);
  bool alu6 = (alu5<110.0f);
  float alu7 = (alu6?alu5:110.0f);
  float alu8 = (alu7*1.4426950408889634f);
  float alu9 = (alu8+12582912.0f);
  int alu10 = as_type<int>(alu9);
  int alu11 = (alu10-1262485504);
  int alu12 = (alu11>>1);
  int alu13 = (alu11-alu12);
  int alu14 = (alu13+127);
  int alu15 = (alu14<<23);
  float alu16 = as_type<float>(alu15);
  int alu17 = (alu12+127);
  int alu18 = (alu17<<23);
  float alu19 = as_type<float>(alu18);
  float alu20 = (float)(alu11);
  float alu21 = (alu20*-0.00021219444005469057f);
  float alu22 = (alu20*0.693359375f);
  float alu23 = (alu7-alu22);
  float alu24 = (alu23-alu21);
  float alu25 = (alu24*1.4426950408889634f);
  float alu26 = exp2(alu25);
  float alu27 = (alu26*alu19);
  float alu28 = (alu27*alu16);
  bool alu29 = (alu3!=alu3);
  float alu30 = (alu29?alu3:alu28);
  half alu31 = (half)(alu30);
  float alu32 = (float)(alu31);
  float alu33 = (float)(((half)1.0f));
  bool alu34 = (alu3<alu33);
  float alu35 = (alu34?alu32:alu2);
  half alu36 = (half)(alu35);
  data0[gidx0] = alu36;
}
"""

def test_elementwise_local() -> None:
  a = Tensor(np.ones((16, 8), np.float32)).realize()
  spec = get_program(_kernel(a + a * 2), MetalRenderer(), [Opt("LOCAL", 0, 32)])
  assert spec.src == ELEMENTWISE_LOCAL
  assert (spec.global_size, spec.local_size) == ((4,), (32,))

def test_sum_grouptop_uses_threadgroup_memory() -> None:
  a = Tensor(np.ones((16, 8), np.float32)).realize()
  spec = get_program(_kernel(a.sum(axis=1)), MetalRenderer(), [Opt("GROUPTOP", 1, 4)])
  assert spec.src == SUM_GROUPTOP
  assert (spec.global_size, spec.local_size) == ((16,), (4,))

def test_half_math_in_float() -> None:
  h = Tensor(np.ones((16, 8), np.float16)).realize()
  spec = get_program(_kernel((h < 1).where(h.exp(), h.cast(dtypes.int32).cast(dtypes.float16))), MetalRenderer(), [])
  assert spec.src == HALF_WHERE_EXP_CAST

def test_metal_device_says_it_needs_macos() -> None:
  import sys
  ok, why = Device.available("METAL")
  if sys.platform != "darwin": assert not ok and "macOS" in why
