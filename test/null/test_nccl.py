"""NCCL discovery (attograd.distributed.nccl): where libnccl is looked for, and the error that says how to get it.
The collectives need CUDA GPUs and are not run here."""
from __future__ import annotations
import ctypes
import pytest
from attograd.distributed import DistributedError, nccl

def test_paths_start_with_the_override(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("NCCL_LIBRARY", "/opt/x/libnccl.so.2")
  paths = nccl.nccl_paths()
  assert paths[0] == "/opt/x/libnccl.so.2" and paths[-2:] == ["libnccl.so.2", "libnccl.so"]

def test_missing_library_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(nccl, "nccl_paths", lambda: ["/nonexistent/libnccl.so.2"])
  with pytest.raises(DistributedError, match=r"pip install nvidia-nccl-cu12.*NCCL_LIBRARY.*/nonexistent/libnccl.so.2"):
    nccl.load_nccl()

def test_finds_an_installed_library() -> None:
  try: lib = nccl.load_nccl()
  except DistributedError as e: pytest.skip(f"no libnccl here: {str(e)[:100]}")
  v = ctypes.c_int()
  assert lib.ncclGetVersion(ctypes.byref(v)) == 0 and v.value >= 2000
