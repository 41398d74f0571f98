"""bench/run.py's bookkeeping: each row's ratio to the best peer and to the machine's limit, and the JSON history
that flags a row more than 10% worse than in the last run of the same configuration."""
from __future__ import annotations
import os, sys
from typing import Any
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.run import Row, changes, load_history, previous_run, print_table, ratio_to_best, ratio_to_limit, save_history

def test_ratio_to_best_peer() -> None:
  # throughput: against the fastest peer; time: against the quickest
  assert ratio_to_best(Row("mm", "GFLOPS", 1.0, {"attograd": 150.0, "numpy": 200.0, "torch": 100.0})) == 0.75
  assert ratio_to_best(Row("first", "s", 0.0, {"attograd": 0.5, "torch": 1.0})) == 2.0
  assert ratio_to_best(Row("x", "us", 0.0, {"attograd": 10.0, "numpy": "RuntimeError: broken"})) is None
  assert ratio_to_best(Row("x", "us", 0.0, {"attograd": "RuntimeError: broken", "torch": 3.0})) is None

def test_ratio_to_machine_limit() -> None:
  limits = {"GFLOPS": 200.0, "GB/s": 40.0}
  assert ratio_to_limit(Row("mm", "GFLOPS", 1.0, {"attograd": 150.0}), limits) == 0.75
  assert ratio_to_limit(Row("sum", "GB/s", 1.0, {"attograd": 30.0}), limits) == 0.75
  assert ratio_to_limit(Row("first", "s", 0.0, {"attograd": 3.0}), limits) is None

def test_history_flags_regressions(tmp_path: Any, capsys: Any) -> None:
  path = str(tmp_path / "h.json")
  assert load_history(path) == []
  first = [Row("mm", "GFLOPS", 1.0, {"attograd": 100.0}), Row("first", "s", 0.0, {"attograd": 1.0}),
           Row("sum", "GB/s", 1.0, {"attograd": 20.0})]
  save_history(path, [], "CPU/full", first, {"GFLOPS": 200.0})
  hist = load_history(path)
  assert previous_run(hist, "CPU/quick") is None and (prev := previous_run(hist, "CPU/full")) is not None
  # mm 5% slower (noise), first run 25% slower (time up), sum 20% faster
  now = [Row("mm", "GFLOPS", 1.0, {"attograd": 95.0}), Row("first", "s", 0.0, {"attograd": 1.25}),
         Row("sum", "GB/s", 1.0, {"attograd": 24.0})]
  ch = changes(now, prev)
  assert round(ch["mm"], 3) == -0.05 and round(ch["first"], 3) == -0.2 and round(ch["sum"], 3) == 0.2
  _, regressed = print_table(now, ["attograd", "torch"], {"GFLOPS": 200.0}, ch)
  assert regressed == ["first"]
  assert "-20% !" in capsys.readouterr().out
  save_history(path, hist, "CPU/full", now, {})
  assert len(load_history(path)) == 2

def test_onnx_rows_compare_with_onnxruntime() -> None:
  # the ONNX rows are latencies in ms; onnxruntime at its best setting is the peer
  row = Row("resnet18 batch 1 latency", "ms", 0.0,
            {"attograd": 60.0, "onnxruntime": 120.0, "onnxruntime 1 thread": 40.0})
  assert ratio_to_best(row) == 40.0 / 60.0

def test_groups_run_from_the_one_entry_point(monkeypatch: Any, capsys: Any) -> None:
  # the ONNX and distributed groups are part of `python -m bench`; a group whose optional packages are missing is
  # skipped with the reason (exit 0), a group that breaks is an error row (exit 1)
  import bench.distributed, bench.onnx, bench.run
  def missing(quick: bool = False) -> Any: raise ModuleNotFoundError("needs mpirun: pip install -e '.[distributed]'")
  def broken(quick: bool = False) -> Any: raise RuntimeError("rank 1 died")
  monkeypatch.setattr(bench.distributed, "rows", missing)
  monkeypatch.setattr(bench.onnx, "rows", lambda quick=False: [
    {"name": "resnet18 batch 1 latency", "unit": "ms", "work": 0.0,
     "values": {"attograd": 50.0, "onnxruntime": 100.0}}])
  assert bench.run.main(["--only", "onnx,distributed", "--quick", "--no-history"]) == 0
  out = capsys.readouterr().out
  assert "distributed skipped: needs mpirun" in out and "resnet18 batch 1 latency" in out and "2.00x" in out
  monkeypatch.setattr(bench.distributed, "rows", broken)
  assert bench.run.main(["--only", "distributed", "--quick", "--no-history"]) == 1
  assert "rank 1 died" in capsys.readouterr().out

def test_gpu_group_skips_without_a_gpu(monkeypatch: Any, capsys: Any) -> None:
  # no CUDA device for torch or for attograd: the GPU rows are skipped with the reason, not failed (exit 0)
  import bench.gpu, bench.run
  def no_gpu() -> Any: raise bench.run.Unavailable("torch sees no CUDA device")
  monkeypatch.setattr(bench.gpu, "_require_gpu", no_gpu)
  assert bench.run.main(["--only", "gpu", "--quick", "--no-history"]) == 0
  assert "gpu skipped: torch sees no CUDA device" in capsys.readouterr().out

def test_firstrun_rows_have_tinygrad_as_a_peer() -> None:
  # the compile-time rows run the same script on attograd and tinygrad (issue 14: compile time next to tinygrad),
  # each with an empty kernel cache; the GPT-2 row is attograd's own model code, so tinygrad has none
  import bench.run
  bench_ = bench.run.make_firstrun(bench.run.QUICK)
  assert "tinygrad" in bench_.setups and "tinygrad" in bench.run.PEERS
  names = set(bench_.setups["tinygrad"]())
  assert "compile: avg_pool 8x8x8 fwd+bwd" in names and not any("GPT-2" in n for n in names)
  script = bench.run._FIRST_RUN["pool"].format(fw="tinygrad", a=0, b=0)
  # tinygrad 0.14 has no requires_grad: only attograd's branch asks for it
  assert "from tinygrad import Tensor" in script and 'if "tinygrad" == "attograd":' in script

def test_matmul_rows_time_the_peers_in_turns_and_on_one_thread() -> None:
  # issue 20: matmul 512/1024/2048 and odd sizes against NumPy and PyTorch at their best (default threads or one),
  # all timed in turns so that a busy machine weighs on each alike, the order rotating so no framework always
  # follows the same one
  import bench.run as br
  order: list[str] = []
  def setup(fw: str) -> Any: return lambda: {"r": lambda: order.append(fw)}
  one = br._timed_call(lambda: (order.append("n1"), [0.5, 0.25])[1])  # times itself (in its own process): 2 calls
  b = br.Bench("x", [br.Row("r", "GFLOPS", 1e9)], {"attograd": setup("a"), "numpy": setup("n"),
                                                    "numpy 1 thread": lambda: {"r": one}, "tinygrad": setup("t")},
               interleave=True)
  br.run_interleaved(b, ["attograd", "numpy"], False, warmup=1, min_rounds=3, max_rounds=3)
  # one warmup round, three timed; tinygrad isn't among the frameworks
  assert order == ["a", "n", "n1", "n", "n1", "a", "n1", "a", "n", "a", "n", "n1"]
  row = b.rows[0]
  assert row.values["numpy 1 thread"] == 1 / 0.375  # 1e9 flops in the median time of its 6 calls (0.25 s and 0.5 s)
  assert row.spread["numpy 1 thread"] == (2.0, 4.0) and "numpy 1 thread" in br.PEERS and "torch 1 thread" in br.PEERS
  assert br.ratio_to_best(br.Row("m", "GFLOPS", 1.0, {"attograd": 3.0, "numpy": 1.0, "torch 1 thread": 2.0})) == 1.5
  full = br.BENCHES["matmul"](br.FULL)
  assert [r.name for r in full.rows] == [f"matmul {n}x{n}" for n in (512, 1024, 2048, 1023, 1500)]
  assert full.interleave and list(full.setups) == ["attograd", "numpy", "torch", "numpy 1 thread", "torch 1 thread"]
  sum_ = br.BENCHES["sum"](br.FULL)
  assert sum_.interleave and list(sum_.setups) == ["attograd", "numpy", "torch", "torch 1 thread"]

def test_spread_is_printed_under_the_table(capsys: Any) -> None:
  import bench.run as br
  row = br.Row("matmul 64x64", "GFLOPS", 1.0, {"attograd": 2.0, "numpy": 1.0}, {"attograd": (1.5, 2.5)})
  br.print_table([row], ["attograd", "numpy"], {}, {})
  assert "matmul 64x64" in (out := capsys.readouterr().out).split("spread")[1] and "attograd 1.5-2.5" in out

def test_peers_run_in_processes_of_their_own() -> None:
  # issue 20: each framework's workload in a process of its own, kept for the run and asked for turns of calls
  import bench.peer as bp
  try:
    peer = bp.PeerProcess.get("numpy", 1)
    assert bp.PeerProcess.get("numpy", 1) is peer and bp.PeerProcess.get("numpy") is not peer
    assert peer.proc.pid != os.getpid()
    times = peer.run("matmul", 64, 3)
    assert 2 <= len(times) <= 3 and all(0 < t < 10 for t in times)
    try:
      peer.run("no such workload", 64, 3)
      raise AssertionError("expected the child's error")
    except RuntimeError as e: assert "KeyError" in str(e)
    assert peer.run("sum", 1000, 2)  # the child is still serving after an error
  finally: bp.PeerProcess.close_all()
  assert peer.proc.poll() == 0 and not bp.PeerProcess._children

def test_peer_environment_is_the_users() -> None:
  # attograd's CPU runtime sets OMP_WAIT_POLICY=passive in its own process; a peer gets the environment the bench
  # started with (its framework's defaults), and a one-thread peer its thread pools at 1 from the start
  import bench.peer as bp
  env = bp.peer_env({"PATH": "/bin", "PYTHONPATH": "/x"}, 0)
  assert "OMP_WAIT_POLICY" not in env and env["PYTHONPATH"].split(os.pathsep) == [bp.ROOT, "/x"]
  one = bp.peer_env({"PATH": "/bin"}, 1)
  assert one["OMP_NUM_THREADS"] == one["OPENBLAS_NUM_THREADS"] == "1" and one["PYTHONPATH"] == bp.ROOT

def test_a_turn_waits_for_spinning_threads_to_settle() -> None:
  # OpenBLAS's workers spin ~0.1 s after a call and take a core from whatever runs next: a turn answers only once
  # its process's threads have stopped using the CPU
  import threading, time
  import bench.peer as bp
  stop = time.perf_counter() + 0.15
  def spin() -> None:
    while time.perf_counter() < stop: pass
  t = threading.Thread(target=spin)
  t.start()
  waited = bp.settle()
  assert waited >= 0.1 and time.perf_counter() >= stop
  t.join()
  assert bp.settle() < 0.1  # nothing running: it returns at once
