"""One framework's workloads in a process of its own, kept for a bench run: `PeerProcess.get(fw, threads)` starts it
(`python -m bench.peer FW THREADS`), `.run(kind, n, reps)` has it do `reps` calls of one workload back to back and
return each call's seconds. Each framework then imports only its own libraries (torch's OpenMP runtime is not put
under attograd's kernels, nor attograd's passive OpenMP waits under torch's), and a framework whose worker threads
keep spinning after a call (OpenBLAS's spin for ~0.1 s, and take a core from whatever runs next) settles before it
answers: the next framework meets a machine that is as quiet as the other processes on it leave it."""
from __future__ import annotations
import json, os, subprocess, sys, time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the environment the bench was started with: attograd's CPU runtime, once imported by the bench itself, sets
# OMP_WAIT_POLICY=passive for its own kernels, and a peer must get its framework's defaults instead
USER_ENV = dict(os.environ)
# per framework: the settings that put its thread pools at one thread (read by the libraries once, at load)
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
BURST_S = 0.025  # a turn's calls stop after this many seconds (at least 2 calls)
SETTLE_MAX_S, SETTLE_POLL_S, SETTLE_IDLE = 1.0, 0.005, 0.1  # idle: CPU seconds per second below which it is quiet

# ***** the workloads, built in the child: each returns a zero-argument callable that does the work once *****

def _matmul(fw: str, threads: int, n: int) -> Callable[[], Any]:
  import numpy as np
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  if fw == "numpy": return lambda: a @ b
  if fw == "torch":
    import torch
    if threads: torch.set_num_threads(threads)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    return lambda: ta @ tb
  from attograd import Tensor
  from bench.run import _attograd_sync, _check
  xa, xb = Tensor(a).realize(), Tensor(b).realize()
  _check(f"matmul {n}", (xa @ xb).numpy(), a @ b)
  return lambda: _attograd_sync(xa @ xb)

def _sum(fw: str, threads: int, n: int) -> Callable[[], Any]:
  import numpy as np
  # uniform in [0, 1): the sum is far from zero, so float32 rounding in any summation order passes the check
  x = np.random.default_rng(2).random(n, dtype=np.float32)
  if fw == "numpy": return lambda: x.sum()
  if fw == "torch":
    import torch
    if threads: torch.set_num_threads(threads)
    tx = torch.from_numpy(x)
    return lambda: tx.sum()
  from attograd import Tensor
  from bench.run import _attograd_sync, _check
  ax = Tensor(x).realize()
  _check(f"sum {n}", ax.sum().numpy(), x.astype(np.float64).sum())
  return lambda: _attograd_sync(ax.sum())

WORKLOADS: dict[str, Callable[[str, int, int], Callable[[], Any]]] = {"matmul": _matmul, "sum": _sum}

def settle(max_s: float = SETTLE_MAX_S) -> float:
  """Wait until this process's threads stop using the CPU (at most max_s); returns the seconds waited."""
  st = time.perf_counter()
  while time.perf_counter() - st < max_s:
    cpu = time.process_time()
    time.sleep(SETTLE_POLL_S)
    if time.process_time() - cpu < SETTLE_IDLE * SETTLE_POLL_S: break
  return time.perf_counter() - st

def serve(fw: str, threads: int) -> None:
  """The child's loop: a JSON request per line, {"kind", "n", "reps"}, answered by {"times": [seconds per call]} or
  {"error": text} once its threads have settled. A turn is `reps` calls back to back, or fewer (at least 2) once
  they took BURST_S; reps 0 only builds the workload, checks it and warms it up."""
  built: dict[tuple[str, int], Callable[[], Any]] = {}
  for line in sys.stdin:
    req = json.loads(line)
    try:
      if (fn := built.get(key := (req["kind"], req["n"]))) is None:
        fn = built[key] = WORKLOADS[req["kind"]](fw, threads, req["n"])
        for _ in range(2): fn()
      times: list[float] = []
      while len(times) < req["reps"] and (len(times) < 2 or sum(times) < BURST_S):
        st = time.perf_counter()
        fn()
        times.append(time.perf_counter() - st)
      out: dict[str, Any] = {"times": times}
    except Exception as e:
      out = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:160]}
    settle()
    print(json.dumps(out), flush=True)

# ***** the parent's side *****

def peer_env(base: dict[str, str], threads: int) -> dict[str, str]:
  """A peer's environment: `base` (the user's), its thread pools at one thread if asked, this checkout importable."""
  path = [ROOT] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
  return {**base, **(ONE_THREAD_ENV if threads == 1 else {}), "PYTHONPATH": os.pathsep.join(path)}

class PeerProcess:
  """A child process serving one framework (at its default threads, 0, or at `threads`), kept for the bench run."""
  _children: dict[tuple[str, int], PeerProcess] = {}
  def __init__(self, fw: str, threads: int):
    env = peer_env(USER_ENV, threads)
    self.proc = subprocess.Popen([sys.executable, "-m", "bench.peer", fw, str(threads)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
  @classmethod
  def get(cls, fw: str, threads: int = 0) -> PeerProcess:
    if (p := cls._children.get((fw, threads))) is None or p.proc.poll() is not None:
      p = cls._children[(fw, threads)] = cls(fw, threads)
    return p
  def run(self, kind: str, n: int, reps: int) -> list[float]:
    assert self.proc.stdin is not None and self.proc.stdout is not None
    self.proc.stdin.write(json.dumps({"kind": kind, "n": n, "reps": reps}) + "\n")
    self.proc.stdin.flush()
    if not (line := self.proc.stdout.readline()): raise RuntimeError(f"the {kind} process exited ({self.proc.wait()})")
    if "error" in (out := json.loads(line)): raise RuntimeError(out["error"])
    return [float(t) for t in out["times"]]
  @classmethod
  def close_all(cls) -> None:
    for p in cls._children.values():
      if p.proc.stdin is not None: p.proc.stdin.close()  # its loop ends: it exits
      p.proc.wait()
    cls._children.clear()

if __name__ == "__main__": serve(sys.argv[1], int(sys.argv[2]))
