"""helpers.py's small functions that tinygrad code imports by name: their exact outputs (formats, rounding, errors)."""
import pickle
import numpy as np
import pytest
from attograd.helpers import (Context, ansistrip, cdiv, cmod, count, diskcache, diskcache_get, diskcache_put,
                              fully_flatten, from_mv, get_shape, getbits, is_numpy_ndarray, merge_dicts, polyN,
                              strip_parens, time_to_str, to_mv, word_wrap)
from attograd.tensor import Tensor

def test_merge_dicts():
  assert merge_dicts([{"a": 1}, {"a": 1, "b": 2}, {}]) == {"a": 1, "b": 2}
  with pytest.raises(RuntimeError, match="'a'"): merge_dicts([{"a": 1}, {"a": 2}])

@pytest.mark.parametrize("s, want", [("(1+2)", "1+2"), ("(1+(2+3))", "1+(2+3)"), ("(int)(1+2)", "(int)(1+2)"),
                                     ("(a)+(b)", "(a)+(b)"), ("(abc", "(abc"), ("abc)", "abc)"), ("((x))", "(x)")])
def test_strip_parens(s, want): assert strip_parens(s) == want

def test_count_pickles_midway():
  c = count(5, 3)
  assert next(c) == 5
  assert next(pickle.loads(pickle.dumps(c))) == 8 and next(c) == 8

def test_time_to_str_picks_the_unit_below_ten_thousand():
  assert [time_to_str(t) for t in (12.5, 10, 0.5, 0.01, 0)] == \
         ["   12.50s ", "10000.00ms", "  500.00ms", "10000.00us", "    0.00us"]
  assert time_to_str(12.5, w=6) == " 12.50s "

def test_c_division_rounds_toward_zero():
  for a in range(-11, 12):
    for b in (-5, -3, 3, 5):
      assert cdiv(a, b) == int(a / b) and cdiv(a, b) * b + cmod(a, b) == a

def test_getbits(): assert (getbits(0b11010110, 4, 7), getbits(0b11010110, 3, 5), getbits(1 << 8, 8, 8)) == (13, 2, 1)

def test_word_wrap_counts_visible_characters():
  red = "\x1b[31myyy\x1b[0m"
  wrapped = word_wrap("x" * 8 + red, wrap=10)
  assert ansistrip(wrapped) == "xxxxxxxxyy\ny" and "\x1b[\n" not in wrapped
  assert word_wrap("x" * 11 + "\n" + "x" * 10, wrap=10).split("\n") == ["x" * 10, "x", "x" * 10]

def test_get_shape():
  assert [get_shape(x) for x in (2, [], [[]], [[1, 2], (3, 4)])] == [(), (0,), (1, 0), (2, 2)]
  with pytest.raises(ValueError, match="inhomogeneous"): get_shape([[1, [2]], [1]])

def test_polyN_horner(): assert [polyN(x, [1.0, -2.0, 1.0]) for x in (1.0, 3.0)] == [0.0, 4.0]

def test_fully_flatten_numpy_scalars_and_empties():
  assert fully_flatten([np.array(3), np.array([]), np.array([[1], [2]]), [4, "ab"]]) == [3, 1, 2, 4, "ab"]

def test_memoryview_roundtrip_shares_memory():
  base = memoryview(bytearray(b"\x11\x22\x33" * 4))
  import ctypes
  to_mv(ctypes.addressof(from_mv(base)), len(base))[0] = 7
  assert base[0] == 7

def test_is_numpy_ndarray():
  assert is_numpy_ndarray(np.zeros(2)) and not is_numpy_ndarray([1]) and not is_numpy_ndarray(Tensor([1]))

def test_diskcache_values_keys_and_tables(tmp_path, monkeypatch):
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  assert diskcache_put("t:able/x", 4, ("complex", 1.5)) == ("complex", 1.5)
  assert diskcache_get("t:able/x", 4) == ("complex", 1.5) and diskcache_get("t:able/x", "4") == ("complex", 1.5)
  assert diskcache_get("t:able/y", 4) is None and diskcache_get("t:able/x", 5) is None
  k1, k2 = {"a": "x", "n": 7, "p": pickle.dumps("cat")}, {"a": "x", "n": 7, "p": pickle.dumps("dog")}
  diskcache_put("d", k1, 1)
  diskcache_put("d", k2, 2)
  diskcache_put("d", k1, 3)  # replaces
  assert (diskcache_get("d", k1), diskcache_get("d", k2)) == (3, 2)
  with Context(CACHELEVEL=0):
    assert diskcache_put("d", k1, 9) == 9 and diskcache_get("d", k1) is None
  assert diskcache_get("d", k1) == 3
  calls = []
  @diskcache
  def f(x):
    calls.append(x)
    return x * 2
  assert (f(3), f(3), f(4), calls) == (6, 6, 8, [3, 4])

def test_disable_gc_restores_the_state_each_level_found():
  from attograd.helpers import disable_gc
  import gc
  was = gc.isenabled()
  depths: list[bool] = []
  @disable_gc()
  def recurse(n: int) -> int:
    depths.append(gc.isenabled())
    return n if n == 0 else recurse(n - 1) + 1
  try:
    gc.enable()
    assert recurse(3) == 3 and depths == [False] * 4 and gc.isenabled()
    with disable_gc():
      assert not gc.isenabled()
      with disable_gc(): assert not gc.isenabled()
      assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with disable_gc(): pass
    assert not gc.isenabled()  # it was off before: it stays off
  finally: (gc.enable if was else gc.disable)()

def test_dev_targets_parse_and_print_back():
  from attograd.helpers import DEV, Target
  # [interface[:indices]+]device[:renderer[:arch]], ';' between targets
  cases = {"cl": [Target("CL")], "cpu:llvm": [Target("CPU", "LLVM")], "::sm_90": [Target(arch="sm_90")],
           "PCI:0,1+AMD": [Target("AMD", interface="PCI", indices="0,1")], ":3+CUDA": [Target("CUDA", indices="3")],
           "CUDA:PTX:sm_80;USB+AMD": [Target("CUDA", "PTX", "sm_80"), Target("AMD", interface="USB")]}
  for text, want in cases.items():
    with Context(DEV=text):
      assert DEV.value == want and DEV.interface == want[0].interface
      assert str(DEV) == {"cl": "CL", "cpu:llvm": "CPU:LLVM"}.get(text, text)  # device and renderer upper-cased
  with Context(DEV="CUDA:PTX;:LLVM"):
    assert DEV.target("CUDA") == Target("CUDA", "PTX") and DEV.target("CPU") == Target("CPU", "LLVM")
    assert DEV.target("CL", renderer="X") == Target("CL", "LLVM")  # a set field is kept
  with Context(DEV="CUDA"): assert DEV.target("CL", arch="a") == Target("CL", arch="a")
  for bad in ("A+B+C", "A:B:C:D"):
    with pytest.raises(RuntimeError, match="too many"): Target.parse(bad)

def test_code_objects_pickle():
  # importing attograd registers a pickler for code objects (as tinygrad does): a function's code goes by value
  import types
  def nested(n): return [[i * j for i in range(n)] for j in range(n)]
  code = pickle.loads(pickle.dumps(nested.__code__))
  assert code is not nested.__code__ and types.FunctionType(code, globals())(3) == nested(3)
  assert types.FunctionType(pickle.loads(pickle.dumps((lambda x: x * 2).__code__)), {})(21) == 42

def test_compiler_with_a_cachekey_uses_its_diskcache_table(tmp_path, monkeypatch):
  # tinygrad's Compiler(cachekey): each binary is stored under its source in the table `cachekey`, while CCACHE is on
  from attograd.device import Compiler
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  runs = []
  class Echo(Compiler):
    def compile(self, src: str) -> bytes:
      runs.append(src)
      return src.encode()[::-1]
  with Context(CCACHE=1):
    assert Echo("echo").compile_cached("abc") == b"cba" and diskcache_get("echo", "abc") == b"cba"
    assert Echo("echo").compile_cached("abc") == b"cba" and runs == ["abc"]  # the second from the cache
  with Context(CCACHE=0):
    assert Echo("echo2").compile_cached("abc") == b"cba" and diskcache_get("echo2", "abc") is None
  assert Echo().cachekey is None and Echo().compile_cached("x") == b"x"  # no key: no cache
