"""The caching allocator: freed buffers are handed out again by size, and a full cache drops the sizes freed longest
ago; the host allocator's copies in and out."""
import array, random
import pytest
from attograd.device import LRUAllocator

class Recording(LRUAllocator):
  def __init__(self, limit: int):
    super().__init__(max_cached_bytes=limit)
    self.n, self.freed = 0, []
  def _alloc(self, nbytes: int) -> tuple[int, int]:
    self.n += 1
    return (nbytes, self.n)
  def _free(self, buf, nbytes: int) -> None: self.freed.append(buf)

def test_reuse_by_size():
  a = Recording(1000)
  x = a.alloc(100)
  a.free(x, 100)
  assert a.alloc(100) is x and a.cached_bytes == 0
  assert a.alloc(100) != x  # the cache is empty again: a fresh one
  assert a.alloc(50) == (50, 3) and a.freed == []

def test_full_cache_drops_oldest_sizes_first():
  a = Recording(300)
  big = [a.alloc(100) for _ in range(3)]
  for b in big: a.free(b, 100)
  assert a.cached_bytes == 300 and a.freed == []
  # a new size arrives: the oldest 100-byte buffers make room (before, the new one was refused and freed at once,
  # so a workload of new sizes never got a cached buffer while an earlier one's filled the cache)
  small = [a.alloc(60) for _ in range(2)]
  for s in small: a.free(s, 60)
  assert a.freed == [big[0], big[1]] and a.cached_bytes == 220
  assert a.alloc(60) in small and a.alloc(60) in small
  assert a.alloc(100) is big[2]
  assert a.cached_bytes == 0 and a.cache == {}

def test_recently_used_size_stays():
  a = Recording(250)
  x, y = a.alloc(100), a.alloc(100)
  z = a.alloc(50)
  a.free(z, 50)
  a.free(x, 100)          # 100 is now the most recent size, 50 the oldest
  a.free(y, 100)
  assert a.cached_bytes == 250 and a.freed == []
  w = a.alloc(80)
  a.free(w, 80)           # over by 80: the 50-byte buffer goes first, then the older 100-byte one
  assert a.freed == [z, x] and a.cached_bytes == 180

def test_too_big_to_cache():
  a = Recording(100)
  x = a.alloc(200)
  a.free(x, 200)
  assert a.freed == [x] and a.cached_bytes == 0

def test_free_cache():
  a = Recording(1000)
  bufs = [a.alloc(n) for n in (10, 20, 20)]
  for b, n in zip(bufs, (10, 20, 20)): a.free(b, n)
  a.free_cache()
  assert sorted(a.freed) == sorted(bufs) and a.cache == {} and a.cached_bytes == 0

@pytest.mark.parametrize("views", ["writable", "readonly", "floats"])
def test_host_copies_of_every_size(views: str) -> None:
  # small copies go through memoryviews, big ones through memmove (runtime/ops_cpu.py): both paths, and the sizes at
  # the boundary, give back the bytes they were given, from writable, read-only and non-byte views
  from attograd.runtime.ops_cpu import _SMALL_COPY, MallocAllocator
  alloc = MallocAllocator()
  for n in (4, 64, _SMALL_COPY - 4, _SMALL_COPY, _SMALL_COPY + 4, 4 * _SMALL_COPY):
    data = random.Random(n).randbytes(n)
    src = memoryview(bytearray(data)) if views == "writable" else memoryview(data)
    if views == "floats": src = memoryview(array.array("f", data))
    buf = alloc.alloc(n)
    alloc.copyin(buf, src)
    out = bytearray(n)
    alloc.copyout(memoryview(out), buf)
    assert bytes(out) == data, n
    half = bytearray(n // 2)  # a copy out of part of the buffer reads its first bytes
    alloc.copyout(memoryview(half), buf)
    assert bytes(half) == data[:n // 2], n
    alloc.free(buf, n)
