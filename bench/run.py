"""`python -m bench`: attograd next to NumPy (and PyTorch and tinygrad when installed) on matmul, a fused
elementwise chain, a sum reduction, per-realize framework overhead, conv, MNIST training, first runs with an empty
kernel cache and LLM inference, all measured in one run. Each row shows attograd's ratio to the best peer and to this
machine's limit (peak FLOPs of an OpenBLAS sgemm, copy bandwidth), both measured in the same run, and its change since
the last run of the same configuration, from a JSON history: a row more than 10% worse is flagged. The matmul and sum
rows run each framework in a process of its own (bench/peer.py), in turns."""
from __future__ import annotations
import argparse, datetime, importlib, importlib.metadata, importlib.util, json, os, platform, statistics, subprocess
import shutil, sys, tempfile, time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable
from bench.peer import PeerProcess

try:
  import numpy as np
except ImportError:
  np = None  # type: ignore[assignment]  # main() explains how to get it

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAMEWORKS = ("attograd", "numpy", "torch", "tinygrad")

@dataclass(frozen=True)
class Sizes:
  matmul: int  # N for an (N, N) @ (N, N) matmul
  elementwise: int  # elements per input of the 5-op chain
  reduce: int  # elements summed
  overhead: int = 16  # elements per tensor in the 10-op overhead graph
  conv_batch: int = 32  # conv2d forward+backward: batch, 32->64 channels, 3x3, 32x32
  mnist_batch: int = 512  # MNIST CNN training step

FULL = Sizes(matmul=1024, elementwise=16 * 1024 * 1024, reduce=16 * 1024 * 1024)
QUICK = Sizes(matmul=256, elementwise=1024 * 1024, reduce=1024 * 1024, conv_batch=8, mnist_batch=64)
# the PYTHON device interprets every element in Python: anything bigger takes minutes
TINY = Sizes(matmul=32, elementwise=4096, reduce=4096, conv_batch=1, mnist_batch=4)

# ***** timing *****

def median_time(fn: Callable[[], Any], warmup: int = 2, min_runs: int = 5, max_runs: int = 50,
                budget_s: float = 1.0) -> float:
  """Median seconds of fn() after `warmup` untimed calls; runs until max_runs or the time budget (at least min_runs)."""
  for _ in range(warmup): fn()
  times: list[float] = []
  start = time.perf_counter()
  while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() - start < budget_s):
    st = time.perf_counter()
    fn()
    times.append(time.perf_counter() - st)
  return statistics.median(times)

# ***** one benchmark = how to run it in each framework *****

@dataclass
class Row:
  name: str
  unit: str  # "GFLOPS", "GB/s", "steps/s", "%": higher is better; "us", "ms", "s": lower is better
  work: float  # flops or bytes per call; for "us" rows unused
  values: dict[str, float | str] = field(default_factory=dict)  # framework -> figure, or the error text
  spread: dict[str, tuple[float, float]] = field(default_factory=dict)  # framework -> quartiles of its figure
  def figure(self, seconds: float) -> float:
    if self.unit == "us": return seconds * 1e6
    if self.unit == "s": return seconds
    return self.work / seconds if self.unit == "steps/s" else self.work / seconds / 1e9

@dataclass
class Bench:
  name: str
  rows: list[Row]
  # framework -> (row name -> a zero-argument callable that does the work once, synchronized)
  setups: dict[str, Callable[[], dict[str, Callable[[], Any]]]]
  # time the frameworks in turns, one turn each per round (run_interleaved), rather than one after the other: on a
  # shared machine each then meets the same load. A turn is one call, or a callable marked `timed_call` that returns
  # its own seconds per call (a few calls in a process of its own: in_processes)
  interleave: bool = False

def _attograd_sync(t: Any) -> Any:
  """Wait until t's kernels have finished, without copying the (possibly huge) result back to the host."""
  from attograd import Device
  t.realize()
  Device[t.device].synchronize()
  return t

def _check(name: str, got: Any, want: Any) -> None:
  # a fast wrong answer is not a result: compare once against NumPy, outside the timed loop
  got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
  if got.shape != want.shape: raise AssertionError(f"{name}: wrong shape {got.shape}, expected {want.shape}")
  if not np.allclose(got, want, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(want).max(initial=0.0)))):
    raise AssertionError(f"{name}: result differs from NumPy (max abs error {np.abs(got - want).max():.3g})")

def _graph10(x: Any, y: Any, relu: Callable[[Any], Any]) -> Any:
  """Ten elementwise ops; one fused kernel in attograd."""
  a = x + y
  a = a * x
  a = a - y
  a = relu(a)
  a = a * 2.0
  a = a + 1.0
  a = a * y
  a = a - x
  a = relu(a)
  return a + 3.0

def _chain(x: Any, y: Any, relu: Callable[[Any], Any]) -> Any: return relu(x * 2.0 + y) * 3.0 - 1.0  # 5 ops

def _timed_call(fn: Callable[[], list[float]]) -> Callable[[], list[float]]:
  fn.timed_call = True  # type: ignore[attr-defined]
  return fn

# calls per turn of a framework in its own process (bench/peer.py; fewer, at least 2, for slow calls): back to back,
# as a user's loop makes them (a framework whose threads wait spinning between calls gets that advantage from the
# second call on); every call counts
REPS = 5

def in_processes(kind: str, n: int, row: Row, frameworks: dict[str, tuple[str, int]]) -> dict[str, Any]:
  """Setups that run the workload `kind` of size n in one process per framework (bench/peer.py), built and checked
  there at setup; `frameworks` maps each column to (framework, threads: 0 for its default)."""
  def setup(fw: str, threads: int) -> Callable[[], dict[str, Callable[[], Any]]]:
    def build() -> dict[str, Callable[[], Any]]:
      PeerProcess.get(fw, threads).run(kind, n, 0)
      return {row.name: _timed_call(lambda: PeerProcess.get(fw, threads).run(kind, n, REPS))}
    return build
  return {col: setup(fw, threads) for col, (fw, threads) in frameworks.items()}

# NumPy and PyTorch at their default threads and on one (some BLAS builds are faster on one thread than on two busy
# cores: the peer's best counts), attograd as it chooses
AT_THEIR_BEST = {"attograd": ("attograd", 0), "numpy": ("numpy", 0), "torch": ("torch", 0),
                 "numpy 1 thread": ("numpy", 1), "torch 1 thread": ("torch", 1)}

def make_matmul(n: int) -> Bench:
  """An (n, n) @ (n, n) float32 matmul, each framework in its own process, timed in turns."""
  row = Row(f"matmul {n}x{n}", "GFLOPS", 2.0 * n**3)
  return Bench("matmul", [row], in_processes("matmul", n, row, AT_THEIR_BEST), interleave=True)

def make_elementwise(n: int) -> Bench:
  rng = np.random.default_rng(1)
  x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
  # bytes counted once: read x and y, write the output; temporaries a framework makes along the way don't count
  chain = Row(f"5-op chain {n >> 20}M" if n >= 1 << 20 else f"5-op chain {n}", "GB/s", 12.0 * n)
  # the same attograd figure, next to a single x+y: how close the fused chain comes to one op's bandwidth
  single = Row("  vs one x+y", "GB/s", 12.0 * n)
  np_relu = lambda a: np.maximum(a, np.float32(0))  # noqa: E731
  def attograd() -> dict[str, Callable[[], Any]]:
    from attograd import Tensor
    tx, ty = Tensor(x).realize(), Tensor(y).realize()
    _check(chain.name, _chain(tx, ty, lambda t: t.relu()).numpy(), _chain(x, y, np_relu))
    run = lambda: _attograd_sync(_chain(tx, ty, lambda t: t.relu()))  # noqa: E731
    return {chain.name: run, single.name: run}
  def numpy() -> dict[str, Callable[[], Any]]:
    return {chain.name: lambda: _chain(x, y, np_relu), single.name: lambda: x + y}
  def torch() -> dict[str, Callable[[], Any]]:
    import torch
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    return {chain.name: lambda: _chain(tx, ty, torch.relu), single.name: lambda: tx + ty}
  return Bench("elementwise", [chain, single], {"attograd": attograd, "numpy": numpy, "torch": torch})

def make_sum(n: int) -> Bench:
  """A float32 sum of n elements, each framework in its own process, timed in turns (NumPy's sum has one thread)."""
  row = Row(f"sum {n >> 20}M" if n >= 1 << 20 else f"sum {n}", "GB/s", 4.0 * n)
  fws = {k: v for k, v in AT_THEIR_BEST.items() if k != "numpy 1 thread"}
  return Bench("sum", [row], in_processes("sum", n, row, fws), interleave=True)

def make_overhead(n: int) -> Bench:
  rng = np.random.default_rng(3)
  x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
  # build the graph and realize it, every call; after warm-up the schedule and the program come from the caches.
  # "same inputs": the identical graph over the same buffers, which attograd finds already realized (hash-consing);
  # "new input": one input is a fresh tensor every call (made from NumPy in every framework), so the kernel runs.
  same = Row(f"10-op graph, {n} elems, same inputs", "us", 0.0)
  fresh = Row(f"10-op graph, {n} elems, new input", "us", 0.0)
  jitted = Row("  the same, TinyJit", "us", 0.0)
  per_kernel = Row("  TinyJit replay, per kernel (of 16)", "us", 0.0)
  xs = [x + np.float32(i) for i in range(64)]
  np_relu = lambda a: np.maximum(a, np.float32(0))  # noqa: E731
  def attograd() -> dict[str, Callable[[], Any]]:
    from attograd import Tensor
    tx, ty = Tensor(x).realize(), Tensor(y).realize()
    _check(same.name, _graph10(tx, ty, lambda t: t.relu()).numpy(), _graph10(x, y, np_relu))
    it = iter(range(1 << 62))
    from attograd import TinyJit
    graph = TinyJit(lambda a, b: _graph10(a, b, lambda t: t.relu()).realize())
    # replay cost per kernel: a jitted function of 16 separate kernels, timed over many calls (self-timed row)
    def chain16(a: Any) -> Any:
      for i in range(16): a = (a * 0.5 + float(i)).contiguous()
      return a.realize()
    many = TinyJit(chain16)
    for _ in range(3): many(tx)
    def per_kernel_run() -> float:
      Device = __import__("attograd").Device
      st = time.perf_counter()
      for _ in range(100): many(tx)
      Device[tx.device].synchronize()
      return (time.perf_counter() - st) / (100 * 16)
    per_kernel_run.self_timed = True  # type: ignore[attr-defined]
    return {per_kernel.name: per_kernel_run,
            same.name: lambda: _attograd_sync(_graph10(tx, ty, lambda t: t.relu())),
            fresh.name: lambda: _attograd_sync(_graph10(Tensor(xs[next(it) % 64]), ty, lambda t: t.relu())),
            jitted.name: lambda: _attograd_sync(graph(Tensor(xs[next(it) % 64]), ty))}
  def numpy_() -> dict[str, Callable[[], Any]]:
    it = iter(range(1 << 62))
    return {same.name: lambda: _graph10(x, y, np_relu),
            fresh.name: lambda: _graph10(xs[next(it) % 64].copy(), y, np_relu)}
  def torch() -> dict[str, Callable[[], Any]]:
    import torch
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    it = iter(range(1 << 62))
    return {same.name: lambda: _graph10(tx, ty, torch.relu),
            fresh.name: lambda: _graph10(torch.from_numpy(xs[next(it) % 64].copy()), ty, torch.relu)}
  return Bench("overhead", [same, fresh, jitted, per_kernel], {"attograd": attograd, "numpy": numpy_, "torch": torch})

def make_conv(batch: int) -> Bench:
  rng = np.random.default_rng(5)
  xn = rng.standard_normal((batch, 32, 32, 32), dtype=np.float32)
  wn = rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
  row = Row(f"conv2d fwd+bwd b{batch} 32->64 3x3 32x32", "us", 0.0)
  def attograd() -> dict[str, Callable[[], Any]]:
    from attograd import Tensor
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    def step() -> Any:
      x.grad = w.grad = None
      x.conv2d(w, padding=1).square().mean().backward()
      Tensor.realize(x.grad, w.grad)  # type: ignore[arg-type]
      return _attograd_sync(w.grad)
    return {row.name: step}
  def torch() -> dict[str, Callable[[], Any]]:
    import torch
    x, w = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    def step() -> Any:
      x.grad = w.grad = None
      torch.nn.functional.conv2d(x, w, padding=1).square().mean().backward()
      return w.grad
    return {row.name: step}
  return Bench("conv", [row], {"attograd": attograd, "torch": torch})

def make_mnist(batch: int) -> Bench:
  """One training step of the classic MNIST CNN (as in examples/beautiful_mnist.py) with Adam."""
  rng = np.random.default_rng(6)
  xn, yn = rng.standard_normal((batch, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, batch).astype(np.int32)
  row = Row(f"MNIST CNN train step, batch {batch}", "steps/s", 1.0)
  def attograd() -> dict[str, Callable[[], Any]]:
    from attograd import Tensor, nn
    layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
              nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64), Tensor.max_pool2d,
              lambda x: x.flatten(1), nn.Linear(576, 10)]
    opt = nn.optim.Adam(nn.state.get_parameters(layers))
    x, y = Tensor(xn).realize(), Tensor(yn).realize()
    def step() -> Any:
      with Tensor.train():
        opt.zero_grad()
        loss = x.sequential(layers).sparse_categorical_crossentropy(y).backward()
        opt.step()
      return _attograd_sync(loss)
    return {row.name: step}
  def torch() -> dict[str, Callable[[], Any]]:
    import torch
    tnn = torch.nn
    model = tnn.Sequential(tnn.Conv2d(1, 32, 5), tnn.ReLU(), tnn.Conv2d(32, 32, 5), tnn.ReLU(), tnn.BatchNorm2d(32),
                           tnn.MaxPool2d(2), tnn.Conv2d(32, 64, 3), tnn.ReLU(), tnn.Conv2d(64, 64, 3), tnn.ReLU(),
                           tnn.BatchNorm2d(64), tnn.MaxPool2d(2), tnn.Flatten(), tnn.Linear(576, 10))
    opt = torch.optim.Adam(model.parameters())
    dev = torch.get_default_device()  # the CPU, or the GPU under bench.gpu (which waits for the GPU after each step)
    x, y = torch.from_numpy(xn).to(dev), torch.from_numpy(yn).long().to(dev)
    def step() -> Any:
      opt.zero_grad()
      loss = tnn.functional.cross_entropy(model(x), y)
      loss.backward()
      opt.step()
      return loss
    return {row.name: step}
  first = Row(f"MNIST CNN first step (new proc) b{batch}", "s", 0.0)
  def fresh(fw: str) -> Callable[[], dict[str, Callable[[], Any]]]:
    # a new interpreter builds the model and runs one step; it reports the time from building the model to the end
    # of that step (kernels come from the on-disk cache, warm after the steps/s row)
    script = _FIRST_STEP.format(batch=batch, fw=fw)
    def run() -> float:
      out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT] + sys.path)})
      if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
      return float(out.stdout.strip().splitlines()[-1])
    run.self_timed = True  # type: ignore[attr-defined]
    return lambda: {first.name: run}
  return Bench("mnist", [row, first], {"attograd": lambda: {**attograd(), **fresh("attograd")()},
                                        "torch": lambda: {**torch(), **fresh("torch")()}})

_FIRST_STEP = """
import time, numpy as np
rng = np.random.default_rng(6)
xn, yn = rng.standard_normal(({batch}, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, {batch}).astype(np.int32)
if "{fw}" != "torch":  # attograd and tinygrad run the same code
  from {fw} import Context, Tensor, nn
  st = time.perf_counter()
  layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
            nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64), Tensor.max_pool2d,
            lambda x: x.flatten(1), nn.Linear(576, 10)]
  opt = nn.optim.Adam(nn.state.get_parameters(layers))
  with Context(TRAINING=1):  # tinygrad 0.14's training switch (attograd's Tensor.train() is the same)
    opt.zero_grad()
    loss = Tensor(xn).sequential(layers).sparse_categorical_crossentropy(Tensor(yn)).backward()
    opt.step()
  loss.item()
else:
  import torch
  tnn = torch.nn
  st = time.perf_counter()
  model = tnn.Sequential(tnn.Conv2d(1, 32, 5), tnn.ReLU(), tnn.Conv2d(32, 32, 5), tnn.ReLU(), tnn.BatchNorm2d(32),
                         tnn.MaxPool2d(2), tnn.Conv2d(32, 64, 3), tnn.ReLU(), tnn.Conv2d(64, 64, 3), tnn.ReLU(),
                         tnn.BatchNorm2d(64), tnn.MaxPool2d(2), tnn.Flatten(), tnn.Linear(576, 10))
  opt = torch.optim.Adam(model.parameters())
  opt.zero_grad()
  loss = tnn.functional.cross_entropy(model(torch.from_numpy(xn)), torch.from_numpy(yn).long())
  loss.backward()
  opt.step()
  loss.item()
print(time.perf_counter() - st)
"""

def _merge(name: str, benches: list[Bench]) -> Bench:
  """One bench of several: rows side by side, each framework's setups merged."""
  fws = dict.fromkeys(fw for b in benches for fw in b.setups)
  def merged(fw: str) -> Callable[[], dict[str, Callable[[], Any]]]:
    return lambda: {k: v for b in benches if fw in b.setups for k, v in b.setups[fw]().items()}
  return Bench(name, [r for b in benches for r in b.rows], {fw: merged(fw) for fw in fws},
               interleave=any(b.interleave for b in benches))

def make_softmax(n: int) -> Bench:
  """Softmax over the rows of an (n, n) float32 matrix; bytes counted once (read the input, write the output)."""
  rng = np.random.default_rng(7)
  x = rng.standard_normal((n, n), dtype=np.float32)
  row = Row(f"row softmax {n}x{n}", "GB/s", 8.0 * n * n)
  def np_softmax(a: Any) -> Any:
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
  def attograd() -> dict[str, Callable[[], Any]]:
    from attograd import Tensor
    tx = Tensor(x).realize()
    _check(row.name, tx.softmax(-1).numpy(), np_softmax(x))
    return {row.name: lambda: _attograd_sync(tx.softmax(-1))}
  def torch() -> dict[str, Callable[[], Any]]:
    import torch
    tx = torch.from_numpy(x)
    return {row.name: lambda: torch.softmax(tx, -1)}
  return Bench("softmax", [row],
               {"attograd": attograd, "numpy": lambda: {row.name: lambda: np_softmax(x)}, "torch": torch})

_LATENCY = {
  "attograd": "from attograd import Tensor\n"
              "a, b = Tensor.ones({n}, {n}).contiguous(), Tensor.ones({n}, {n}).contiguous()\n"
              "(a @ b).relu().sum().item()\n",
  "numpy": "import numpy as np\na, b = np.ones(({n}, {n}), np.float32), np.ones(({n}, {n}), np.float32)\n"
           "float(np.maximum(a @ b, 0).sum())\n",
  "torch": "import torch\na, b = torch.ones({n}, {n}), torch.ones({n}, {n})\n(a @ b).relu().sum().item()\n"}

def make_latency(n: int) -> Bench:
  """A whole new process: import, an (n, n) matmul, relu and sum, read back. Cold: an empty kernel cache."""
  warm = Row(f"new process: import+mm{n}+relu+sum", "s", 0.0)
  cold = Row("  the same, empty kernel cache", "s", 0.0)
  def timed(fw: str, cache: str | None) -> Callable[[], float]:
    def run() -> float:
      env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT] + sys.path)}
      with tempfile.TemporaryDirectory() as tmp:
        if cache == "empty": env["ATTOGRAD_CACHE_DIR"] = tmp
        st = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", _LATENCY[fw].format(n=n)], capture_output=True, text=True,
                             timeout=600, env=env)
        et = time.perf_counter() - st
      if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
      return et
    run.self_timed = True  # type: ignore[attr-defined]
    return run
  def setup(fw: str) -> Callable[[], dict[str, Callable[[], Any]]]:
    rows = {warm.name: timed(fw, None)}
    if fw == "attograd": rows[cold.name] = timed(fw, "empty")
    return lambda: rows
  return Bench("latency", [warm, cold], {fw: setup(fw) for fw in ("attograd", "numpy", "torch")})

# ***** first runs: a fresh process with an empty kernel cache, everything built from scratch *****

# each script prints the seconds from building its inputs (or model) to the end of the work, as its last line;
# {fw} picks the framework, {a}, {b}, {c} are sizes
_FIRST_RUN = {
  "conv": """
import time, numpy as np
rng = np.random.default_rng(5)
xn, wn = rng.standard_normal(({a}, 32, 32, 32), dtype=np.float32), rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
if "{fw}" != "torch":  # attograd and tinygrad run the same code
  from {fw} import Tensor
else: import torch
st = time.perf_counter()  # after the imports, as in the MNIST first step: the work, not the interpreter
if "{fw}" != "torch":  # attograd and tinygrad run the same code
  x, w = Tensor(xn), Tensor(wn)
  if "{fw}" == "attograd":  # tinygrad 0.14 has no requires_grad: every float tensor gets a .grad
    for t in (x, w): t.requires_grad_()
  x.conv2d(w, padding=1).square().mean().backward()
  x.grad.numpy(), w.grad.numpy()
else:
  x, w = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  torch.nn.functional.conv2d(x, w, padding=1).square().mean().backward()
  x.grad.numpy(), w.grad.numpy()
print(time.perf_counter() - st)
""",
  # compile-bound: small tensors, so the time is lowering and compiling (forward and backward)
  "pool": """
import time, numpy as np
xn = np.random.default_rng(8).standard_normal((1, 2, 16, 16, 16), dtype=np.float32)
if "{fw}" != "torch":  # attograd and tinygrad run the same code
  from {fw} import Tensor
else: import torch
st = time.perf_counter()  # after the imports, as in the MNIST first step: the work, not the interpreter
if "{fw}" != "torch":  # attograd and tinygrad run the same code
  x = Tensor(xn)
  if "{fw}" == "attograd":  # tinygrad 0.14 has no requires_grad: every float tensor gets a .grad
    for t in (x,): t.requires_grad_()
  x.avg_pool2d(kernel_size=(8, 8, 8), stride=1).square().sum().backward()
else:
  x = torch.tensor(xn, requires_grad=True)
  torch.nn.functional.avg_pool3d(x, (8, 8, 8), stride=1).square().sum().backward()
x.grad.numpy()
print(time.perf_counter() - st)
""",
  "conv5": """
import time, numpy as np
rng = np.random.default_rng(9)
xn, wn = rng.standard_normal((8, 16, 28, 28), dtype=np.float32), rng.standard_normal((32, 16, 5, 5), dtype=np.float32)
if "{fw}" != "torch":  # attograd and tinygrad run the same code
  from {fw} import Tensor
else: import torch
st = time.perf_counter()  # after the imports, as in the MNIST first step: the work, not the interpreter
if "{fw}" != "torch":  # attograd and tinygrad run the same code
  x, w = Tensor(xn), Tensor(wn)
  if "{fw}" == "attograd":  # tinygrad 0.14 has no requires_grad: every float tensor gets a .grad
    for t in (x, w): t.requires_grad_()
  x.conv2d(w).relu().sum().backward()
else:
  x, w = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  torch.nn.functional.conv2d(x, w).relu().sum().backward()
x.grad.numpy(), w.grad.numpy()
print(time.perf_counter() - st)
""",
  "softmax": """
import time, numpy as np
xn = np.random.default_rng(10).standard_normal((64, 1000), dtype=np.float32)
if "{fw}" != "torch":  # attograd and tinygrad run the same code
  from {fw} import Tensor
else: import torch
st = time.perf_counter()  # after the imports, as in the MNIST first step: the work, not the interpreter
if "{fw}" != "torch":  # attograd and tinygrad run the same code
  x = Tensor(xn)
  if "{fw}" == "attograd":  # tinygrad 0.14 has no requires_grad: every float tensor gets a .grad
    for t in (x,): t.requires_grad_()
  (x.softmax(-1) * x).sum().backward()
else:
  x = torch.tensor(xn, requires_grad=True)
  (torch.softmax(x, -1) * x).sum().backward()
x.grad.numpy()
print(time.perf_counter() - st)
""",
  # the LLM path: a GPT-2-small-shaped llama (random weights) prefills {a} tokens and greedily generates {b} more
  "gpt2": """
import time
from bench.llm import TorchLlama, gpt2_shaped
cfg, w = gpt2_shaped()
prompt = [1 + (i * 7919) % (cfg.vocab_size - 1) for i in range({a})]
if "{fw}" == "attograd":
  from attograd import Tensor
  from attograd.llm.model import Llama
else: import torch
st = time.perf_counter()  # after the imports, as in the MNIST first step: the work, not the interpreter
if "{fw}" == "attograd":
  from attograd.llm.model import Llama
  m = Llama(cfg, {{k: Tensor(v) for k, v in w.items()}}, max_context=256)
  tok = int(m.prefill(prompt).argmax().item())
  for p in range({a}, {a} + {b}):
    m.step(tok, p)
    tok = m.greedy_token()
else:
  with torch.inference_mode():
    tm = TorchLlama(cfg, w, 256)
    tok = int(tm.forward(prompt, 0).argmax())
    for p in range({a}, {a} + {b}): tok = int(tm.forward([tok], p).argmax())
print(time.perf_counter() - st)
"""}

def _tinygrad_env(env: dict[str, str], tmp: str) -> None:
  """tinygrad on its CPU device (as attograd's default) with an empty kernel cache. Its CPU device runs `clang`;
  where only a versioned one is installed (Debian's clang-15), a link named clang goes first on PATH."""
  env.update({"DEV": "CPU", "CACHEDB": os.path.join(tmp, "tinygrad_cache.db")})
  if shutil.which("clang", path=env.get("PATH")) is None:
    found = sorted((f for d in env.get("PATH", "").split(os.pathsep) if os.path.isdir(d) for f in os.listdir(d)
                    if f.startswith("clang-") and f[6:].isdigit()), key=lambda f: int(f[6:]))
    if found and (exe := shutil.which(found[-1], path=env.get("PATH"))):
      os.symlink(exe, os.path.join(tmp, "clang"))
      env["PATH"] = tmp + os.pathsep + env.get("PATH", "")

def fresh_process(script: str, empty_cache: bool, fw: str = "attograd") -> Callable[[], float]:
  """A self-timed row: run `script` in a new interpreter (with an empty kernel cache if asked); its figure is the
  seconds the script prints, which leave out starting Python and importing NumPy."""
  def run() -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT] + sys.path)}
    with tempfile.TemporaryDirectory() as tmp:
      if empty_cache: env["ATTOGRAD_CACHE_DIR"] = tmp
      if fw == "tinygrad": _tinygrad_env(env, tmp)
      out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, env=env)
    if out.returncode != 0: raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
    return float(out.stdout.strip().splitlines()[-1])
  run.self_timed = True  # type: ignore[attr-defined]
  return run

def make_firstrun(s: Sizes) -> Bench:
  """What a new program waits for: every kernel lowered and compiled in a fresh process with an empty cache. PyTorch
  runs the same work in a fresh process (it compiles nothing)."""
  cases = [("conv", f"first run: conv2d fwd+bwd b{s.conv_batch} 3x3", (s.conv_batch, 0)),
           ("mnist", f"first run: MNIST step b{s.mnist_batch}", (s.mnist_batch, 0)),
           ("gpt2", "first run: GPT-2-shaped 8+8 tokens", (8, 8)),
           ("pool", "compile: avg_pool 8x8x8 fwd+bwd", (0, 0)),
           ("conv5", "compile: conv2d 5x5 fwd+bwd", (0, 0)),
           ("softmax", "compile: softmax fwd+bwd", (0, 0))]
  if s is TINY: cases = [c for c in cases if c[0] in ("softmax", "conv5")]  # the interpreter: minutes for the rest
  rows = [Row(name, "s", 0.0) for _, name, _ in cases]
  def script(key: str, fw: str, a: int, b: int) -> str:
    if key == "mnist": return _FIRST_STEP.format(batch=a, fw=fw)
    return _FIRST_RUN[key].format(fw=fw, a=a, b=b)
  def setup(fw: str) -> Callable[[], dict[str, Callable[[], Any]]]:
    # tinygrad (the design attograd follows, a peer where installed) runs the same scripts; the GPT-2 row is attograd's
    # own model code
    return lambda: {name: fresh_process(script(key, fw, *ab), fw != "torch", fw) for key, name, ab in cases
                    if fw != "tinygrad" or key != "gpt2"}
  return Bench("firstrun", rows, {fw: setup(fw) for fw in ("attograd", "torch", "tinygrad")})

BENCHES: dict[str, Callable[[Sizes], Bench]] = {
  "matmul": lambda s: _merge("matmul", [make_matmul(n) for n in
                                       ((512, 1024, 2048, 1023, 1500) if s.matmul == 1024 else (s.matmul,))]),
  "softmax": lambda s: make_softmax(s.matmul * 4),
  "latency": lambda s: make_latency(s.matmul),
  "elementwise": lambda s: make_elementwise(s.elementwise),
  "sum": lambda s: make_sum(s.reduce),
  "overhead": lambda s: make_overhead(s.overhead),
  "conv": lambda s: make_conv(s.conv_batch),
  "mnist": lambda s: make_mnist(s.mnist_batch),
  "firstrun": make_firstrun,
}

# ***** running and printing *****

def _short_error(e: BaseException) -> str:
  msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
  return f"{type(e).__name__}: {msg}"[:160]

def _base(fw: str) -> str: return fw.removesuffix(" 1 thread")

def _quartiles(xs: list[float]) -> tuple[float, float]:
  q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
  return q[0], q[2]

def run_interleaved(bench: Bench, frameworks: list[str], verbose: bool, warmup: int = 2, min_rounds: int = 7,
                    max_rounds: int = 21, budget_s: float = 6.0) -> None:
  """Each row: every framework's turn once per round, for at least min_rounds (and up to max_rounds within the time
  budget), the order rotating by one each round (no framework always follows the same one); each framework's figure
  is the median of its calls, and its spread their quartiles. A framework's one-thread variant runs where the
  framework itself does. A turn is one call, or a `timed_call`'s own list of seconds per call."""
  fns: dict[str, dict[str, Callable[[], Any]]] = {}
  for fw in bench.setups:
    if _base(fw) not in frameworks: continue
    try: fns[fw] = bench.setups[fw]()
    except Exception as e:
      if verbose: traceback.print_exc()
      for row in bench.rows: row.values[fw] = _short_error(e)
  def turn(fn: Callable[[], Any]) -> list[float]:
    if getattr(fn, "timed_call", False): return [float(t) for t in fn()]
    st = time.perf_counter()
    fn()
    return [time.perf_counter() - st]
  for row in bench.rows:
    live = {fw: f[row.name] for fw, f in fns.items() if row.name in f}
    order, times = list(live), {fw: list[float]() for fw in live}
    start = time.perf_counter()
    for r in range(warmup + max_rounds):
      if r >= warmup + min_rounds and time.perf_counter() - start > budget_s: break
      for fw in order[r % len(order):] + order[:r % len(order)]:
        if fw not in live: continue
        try: ts = turn(live[fw])
        except Exception as e:
          if verbose: traceback.print_exc()
          row.values[fw] = _short_error(e)
          del live[fw]
          continue
        if r >= warmup: times[fw].extend(ts)
    for fw in live:
      row.values[fw] = row.figure(statistics.median(times[fw]))
      lo, hi = sorted(row.figure(t) for t in _quartiles(times[fw]))
      row.spread[fw] = (lo, hi)

def run_bench(bench: Bench, frameworks: list[str], verbose: bool) -> None:
  if bench.interleave:
    try: return run_interleaved(bench, frameworks, verbose)
    finally: PeerProcess.close_all()
  for fw in frameworks:
    if fw not in bench.setups: continue  # e.g. NumPy has no autograd: the cell stays "-"
    try:
      fns = bench.setups[fw]()
    except Exception as e:  # one broken framework must not stop the others
      if verbose: traceback.print_exc()
      for row in bench.rows: row.values[fw] = _short_error(e)
      continue
    # the overhead loop is microseconds per call: more runs, same budget
    kw = {"min_runs": 50, "max_runs": 2000} if bench.name == "overhead" else {}
    measured: dict[int, float | str] = {}  # rows that share one callable are timed once
    for row in bench.rows:
      if (fn := fns.get(row.name)) is None: continue  # this framework has no such row: the cell stays "-"
      if id(fn) not in measured:
        try:
          # a self-timed callable returns its own figure (seconds), e.g. measured inside a fresh process
          if getattr(fn, "self_timed", False): measured[id(fn)] = statistics.median(fn() for _ in range(3))
          else: measured[id(fn)] = median_time(fn, **kw)
        except Exception as e:
          if verbose: traceback.print_exc()
          measured[id(fn)] = _short_error(e)
      t = measured[id(fn)]
      row.values[fw] = row.figure(t) if isinstance(t, float) else t

LOWER_IS_BETTER = ("us", "ms", "s")
# the peers "vs best" compares with; onnxruntime is the ONNX rows' peer (its default threads and 1 thread)
PEERS = ("numpy", "torch", "tinygrad", "onnxruntime", "onnxruntime 1 thread", "numpy 1 thread", "torch 1 thread")
# groups measured by their own modules (each runs its frameworks itself, in turns or in separate processes); a group
# whose optional packages are missing is skipped with the reason, not counted as a failure
GROUPS = ("llm", "onnx", "distributed", "gpu")

class Unavailable(Exception):
  """A group with nothing to measure on this machine (bench.gpu without a GPU): skipped with the reason, not failed."""
REGRESSION = 0.10  # a row this much worse than in the last run of the same configuration is flagged

def _speedup(a: float, b: float, unit: str) -> float:
  """How many times better a is than b (> 1: a is better), for throughput and for time rows alike."""
  return b / a if unit in LOWER_IS_BETTER else a / b

def ratio_to_best(row: Row) -> float | None:
  """attograd against the best peer on this row (> 1: attograd is faster); None without both figures."""
  a = row.values.get("attograd")
  peers = [v for fw, v in row.values.items() if fw in PEERS and isinstance(v, float) and v > 0]
  if not isinstance(a, float) or a <= 0 or not peers: return None
  best = min(peers) if row.unit in LOWER_IS_BETTER else max(peers)
  return _speedup(a, best, row.unit)

def ratio_to_limit(row: Row, limits: dict[str, float]) -> float | None:
  """attograd's share of what this machine can do: GFLOPS rows against peak sgemm, GB/s rows against copy bandwidth."""
  a, lim = row.values.get("attograd"), limits.get(row.unit)
  return a / lim if isinstance(a, float) and lim else None

def measure_limits(quick: bool) -> dict[str, float]:
  """The machine's limits, measured now (the machine may be busy: same conditions as the rows): peak float32 FLOPs of
  NumPy's sgemm (OpenBLAS) on a big matrix, and the bandwidth of a copy far bigger than the caches (read + write)."""
  n, m = (1024, 1 << 23) if quick else (2048, 1 << 25)
  a, b = np.ones((n, n), np.float32), np.ones((n, n), np.float32)
  src, dst = np.ones(m, np.float32), np.empty(m, np.float32)
  return {"GFLOPS": 2.0 * n**3 / median_time(lambda: a @ b) / 1e9,
          "GB/s": 2.0 * src.nbytes / median_time(lambda: np.copyto(dst, src)) / 1e9}

# ***** history: each run appends its figures; the next run of the same configuration compares against it *****

def default_history() -> str:
  base = os.getenv("ATTOGRAD_CACHE_DIR") or os.path.join(os.getenv("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                                         "attograd")
  return os.path.join(base, "bench_history.json")

def load_history(path: str) -> list[dict[str, Any]]:
  try:
    with open(path) as f: hist = json.load(f)
    return hist if isinstance(hist, list) else []
  except (OSError, ValueError): return []  # none yet, or unreadable: this run starts a new one

def previous_run(history: list[dict[str, Any]], config: str) -> dict[str, Any] | None:
  return next((h for h in reversed(history) if h.get("config") == config), None)

def changes(rows: list[Row], prev: dict[str, Any] | None) -> dict[str, float]:
  """Per row, attograd's change since the previous run as a speedup - 1 (-0.2: 20% worse), where both have a figure."""
  if prev is None: return {}
  out = {}
  for row in rows:
    old, new = prev.get("rows", {}).get(row.name, {}).get("attograd"), row.values.get("attograd")
    if isinstance(old, (int, float)) and isinstance(new, float) and old > 0 and new > 0:
      out[row.name] = _speedup(new, float(old), row.unit) - 1
  return out

def save_history(path: str, history: list[dict[str, Any]], config: str, rows: list[Row],
                 limits: dict[str, float]) -> None:
  entry = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "config": config,
           "commit": _commit(), "limits": limits,
           "rows": {r.name: {"unit": r.unit, **{fw: v for fw, v in r.values.items() if isinstance(v, float)}}
                    for r in rows}}
  try:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f: json.dump((history + [entry])[-500:], f, indent=1)
    os.replace(tmp, path)
  except OSError as e: print(f"bench: could not write the history {path}: {e}")

def _commit() -> str:
  try: return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
  except (OSError, subprocess.TimeoutExpired): return ""

def print_table(rows: list[Row], frameworks: list[str], limits: dict[str, float],
                change: dict[str, float]) -> tuple[list[str], list[str]]:
  """Print the table; return the error messages it refers to as [1], [2], ... and the rows that regressed."""
  errors: list[str] = []
  def cell(row: Row, fw: str) -> str:
    v = row.values.get(fw)
    if v is None: return "-"
    if isinstance(v, float): return f"{v:.1f}" if v >= 10 else f"{v:.3g}"
    if v not in errors: errors.append(v)
    return f"error[{errors.index(v) + 1}]"
  peers = [fw for fw in PEERS if fw in frameworks]
  # frameworks only some rows have (the LLM rows' llama.cpp and quantized attograd) get a column each, after the peers
  extra = list(dict.fromkeys(fw for row in rows for fw in row.values if fw not in FRAMEWORKS))
  header = f"{'benchmark':<40}{'unit':>8}{'attograd':>11}" + "".join(f"{fw:>11}" for fw in peers)
  width = {fw: max(20, len(fw) + 2) for fw in extra}
  header += "".join(f"{fw:>{width[fw]}}" for fw in extra) + f"{'vs best':>9}{'vs limit':>10}{'vs last':>10}"
  print(header)
  print("-" * len(header))
  regressed = []
  for row in rows:
    line = f"{row.name:<40}{row.unit:>8}{cell(row, 'attograd'):>11}" + "".join(f"{cell(row, fw):>11}" for fw in peers)
    line += "".join(f"{cell(row, fw):>{width[fw]}}" for fw in extra)
    best, lim, ch = ratio_to_best(row), ratio_to_limit(row, limits), change.get(row.name)
    line += f"{f'{best:.2f}x' if best is not None else '-':>9}{f'{lim:.0%}' if lim is not None else '-':>10}"
    if ch is not None and ch < -REGRESSION: regressed.append(row.name)
    line += f"{(f'{ch:+.0%}' + (' !' if ch < -REGRESSION else '  ')) if ch is not None else '-':>10}"
    print(line)
  print("vs best = attograd speed / the best peer's (> 1: attograd is faster; for 'us', 'ms' and 's' rows lower "
        "time is faster); vs limit = attograd's share of the machine's peak sgemm FLOPs (GFLOPS rows) or copy "
        "bandwidth (GB/s rows); vs last = the change since the last run of this configuration, '!' when over "
        f"{REGRESSION:.0%} worse")
  if (spread := [row for row in rows if row.spread]):
    print("spread of the rows timed in turns (each framework's middle half of calls, in the row's unit):")
    for row in spread:
      print(f"  {row.name:<38}" + ", ".join(f"{fw} {lo:.3g}-{hi:.3g}" for fw, (lo, hi) in row.spread.items()))
  return errors, regressed

def _attograd_device() -> str:
  try:
    from attograd import Device
    return Device.DEFAULT
  except Exception as e:
    return f"unavailable ({_short_error(e)})"

def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                   epilog="Exit status is 1 when any benchmark failed (its error is printed), else 0.")
  parser.add_argument("--quick", action="store_true", help="smaller sizes, for a fast smoke run")
  parser.add_argument("--only", metavar="NAME", help=f"comma-separated subset of: {', '.join((*BENCHES, *GROUPS))}")
  parser.add_argument("-v", "--verbose", action="store_true", help="print full tracebacks of failing benchmarks")
  parser.add_argument("--history", metavar="PATH", default=default_history(),
                      help="the JSON history this run is compared with and appended to (default: %(default)s)")
  parser.add_argument("--no-history", action="store_true", help="neither compare with nor record into the history")
  args = parser.parse_args(argv)
  if np is None:
    print("bench: NumPy is needed for the reference figures; install it with `pip install -e '.[test]'`")
    return 1
  names = [n.strip() for n in args.only.split(",")] if args.only else [*BENCHES, *GROUPS]
  if (unknown := [n for n in names if n not in BENCHES and n not in GROUPS]):
    parser.error(f"--only: unknown benchmark {', '.join(unknown)}; choose from {', '.join((*BENCHES, *GROUPS))}")

  device = _attograd_device()
  sizes = TINY if device == "PYTHON" else QUICK if args.quick else FULL
  frameworks = ["attograd", "numpy"]
  # torch is first imported by its own runs, after attograd's kernels have loaded the system's OpenMP: a torch imported
  # here would put its bundled libgomp under attograd's CPU kernels too (2x slower on a busy 2-core machine). So the
  # version comes from the package metadata; a broken install shows up as error cells in the torch columns.
  if importlib.util.find_spec("torch") is not None:
    frameworks.append("torch")
    torch_line = f"torch {importlib.metadata.version('torch')}"
  else: torch_line = "torch: not installed"
  # tinygrad, where installed, is a peer on the rows that run in fresh processes (first runs and compile times)
  if importlib.util.find_spec("tinygrad") is not None:
    frameworks.append("tinygrad")
    torch_line += f", tinygrad {importlib.metadata.version('tinygrad')}"
  print(f"attograd device {device}" + (" (tiny sizes: the PYTHON device is an interpreter)" if sizes is TINY else ""))
  print(f"numpy {np.__version__}, {torch_line}, python {platform.python_version()}, {os.cpu_count()} cpus")
  limits = measure_limits(sizes is not FULL)
  print(f"machine limits, measured now: peak sgemm {limits['GFLOPS']:.1f} GFLOPS (NumPy/OpenBLAS), copy bandwidth "
        f"{limits['GB/s']:.1f} GB/s")
  print()

  rows: list[Row] = []
  for name in names:
    if name in GROUPS:  # measured by bench/<name>.py: its rows come back filled in
      try:
        mod = importlib.import_module(f"bench.{name}")
        quick = args.quick or sizes is TINY
        got = mod.rows(quick, args.verbose) if name in ("llm", "gpu") else mod.rows(quick)
        rows.extend(Row(r["name"], r["unit"], r["work"], r["values"]) for r in got)
      except (ModuleNotFoundError, Unavailable) as e:
        print(f"bench: {name} skipped: {e}")
      except Exception as e:
        if args.verbose: traceback.print_exc()
        rows.append(Row(name, "-", 0.0, {fw: _short_error(e) for fw in frameworks}))
      continue
    try: bench = BENCHES[name](sizes)
    except Exception as e:
      if args.verbose: traceback.print_exc()
      rows.append(Row(name, "-", 0.0, {fw: _short_error(e) for fw in frameworks}))
      continue
    run_bench(bench, frameworks, args.verbose)
    rows.extend(bench.rows)
  config = f"{device}/{'full' if sizes is FULL else 'quick' if sizes is QUICK else 'tiny'}/{','.join(names)}"
  history = [] if args.no_history else load_history(args.history)
  prev = previous_run(history, config)
  errors, regressed = print_table(rows, frameworks, limits, changes(rows, prev))
  for i, e in enumerate(errors): print(f"[{i + 1}] {e}")
  if errors and not args.verbose: print("run with -v for full tracebacks")
  if prev is not None:
    print(f"compared with the run of {prev.get('time', '?')} (commit {prev.get('commit') or '?'}) in {args.history}")
  if regressed: print(f"REGRESSED more than {REGRESSION:.0%} since then: {', '.join(regressed)}")
  if not args.no_history: save_history(args.history, history, config, rows, limits)
  return 1 if errors else 0
