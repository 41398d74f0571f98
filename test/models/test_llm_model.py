"""The llama-family model: stories260K (a real GGUF model) reproduces llama2.c's greedy output byte for byte, in F32,
F16, Q8_0 and Q4_0; logits match a reference; decode compiles nothing after its first step; and synthetic models
(GQA, neox rope with q/k/v biases, tied output, partial rotary) match a NumPy forward pass written here."""
from __future__ import annotations
import json, math, os, struct, subprocess, sys
from typing import Any
import pytest
import attograd.tensor.core as tensor_mod
from attograd import Context, GlobalCounters, Tensor, TinyJit
from attograd.engine import realize
from attograd.llm.generate import LLM
from attograd.llm.model import Llama, LlamaConfig
from attograd.llm.sampling import Sampler
from helpers import llm_data_dir

np = pytest.importorskip("numpy")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLM_DIR = llm_data_dir()
STORIES = os.path.join(LLM_DIR, "stories260K.gguf")
REF = os.path.join(LLM_DIR, "reference")
needs_model = pytest.mark.skipif(not os.path.exists(STORIES), reason=f"the shared LLM files are missing ({STORIES})")

@pytest.fixture(scope="module")
def stories() -> LLM:
  return LLM.load(STORIES)

@needs_model
def test_greedy_200_matches_llama2c(stories: LLM) -> None:
  # llama2.c's test: `run stories260K.bin -t 0.0 -n 200`, greedy from BOS, 200 positions
  text = stories.generate([1], Sampler(temperature=0.0), 200)
  with open(os.path.join(REF, "llama2c_expected_greedy_200steps.txt"), "rb") as f: want = f.read()
  assert text.encode("utf-8") == want
  assert stories.stats.generated == 200 and stories.stats.finish_reason == "length"

@needs_model
def test_logits_at_pos0(stories: LLM) -> None:
  got = stories.model.prefill([1]).numpy()
  want = np.load(os.path.join(REF, "stories260K_F32_logits_pos0_bos.npy"))
  assert got.shape == want.shape == (512,)
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
  assert int(got.argmax()) == 403  # "▁Once"

@needs_model
@pytest.mark.slow
@pytest.mark.parametrize("name,key", [("stories260K-F16.gguf", "F16"), ("stories260K-Q8_0.gguf", "Q8_0"),
                                      ("stories260K-Q4_0.gguf", "Q4_0")])
def test_derived_files_generate(name: str, key: str) -> None:
  llm = LLM.load(os.path.join(LLM_DIR, "derived", name))
  with open(os.path.join(REF, "greedy_outputs.json")) as f: ref = json.load(f)["results"][key]
  ids = [1]
  logits = llm.model.prefill(ids)
  for pos in range(1, 201):
    ids.append(int(logits.argmax().item()))
    if pos < 200: logits = llm.model.step(ids[-1], pos)
  # F16 must equal llama2.c; Q8_0/Q4_0 equal the dataset's dequantize-then-f32 NumPy run (not third-party truth)
  assert ids == ref["ids"]
  assert llm.tokenizer.decode(ids) == ref["text"]

@needs_model
@pytest.mark.parametrize("name", ["stories260K-Q8_0.gguf", "stories260K-Q4_0.gguf"])
def test_decode_steps_dequantize_their_embedding_rows_themselves(name: str) -> None:
  # a quantized embedding table: a decode step's input is its token's raw blocks, dequantized inside the step's own
  # jit (no jitted lookup and read-back per token); the logits are the prefill's of the same tokens
  m = LLM.load(os.path.join(LLM_DIR, "derived", name), quantized=True, int8=False).model
  ids = [1, 403, 29, 15, 287]
  want = m.prefill(ids).numpy()
  m.prefill(ids[:1])
  for pos, t in enumerate(ids[1:], 1): got = m.step(t, pos).numpy()
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
  assert m._embedding_rows is not None and 1 not in m._embedding_rows.runs
  with pytest.raises(ValueError, match="outside the vocabulary"): m.step(512, len(ids))

@needs_model
def test_int8_activations_track_the_float_path() -> None:
  # llama.cpp's rounding (the activation row in int8 blocks, QuantizedTensor.dot) against the exact fused float path
  # on the same Q4_0 weights: logits within 3% of their largest, and the same greedy tokens (the exact path is what
  # test_derived_files_generate pins to its reference; this one stays close to it)
  path = os.path.join(LLM_DIR, "derived", "stories260K-Q4_0.gguf")
  a, b = LLM.load(path, quantized=True, int8=True), LLM.load(path, quantized=True, int8=False)
  assert a.model.int8 and not b.model.int8
  ids = [1, 403, 251, 93]
  la, lb = a.model.prefill(ids).numpy(), b.model.prefill(ids).numpy()
  for pos in range(len(ids), len(ids) + 20):
    assert np.abs(la - lb).max() <= 0.03 * np.abs(lb).max() and la.argmax() == lb.argmax()
    tok = int(lb.argmax())
    la, lb = a.model.step(tok, pos).numpy(), b.model.step(tok, pos).numpy()

@needs_model
def test_q8_0_output_projection_takes_wide_activations() -> None:
  # with int8 activations a Q8_0 output projection (here the tied embedding) takes them in 23-bit blocks instead
  # (QuantizedTensor.dot's wide): its logits stay within float32's rounding of the float path's, where int8 ones
  # moved SmolLM2's by ~1% and changed a greedy answer
  path = os.path.join(LLM_DIR, "derived", "stories260K-Q8_0.gguf")
  a, b = LLM.load(path, quantized=True, int8=True).model, LLM.load(path, quantized=True, int8=False).model
  assert a.output.words is not None and b.output.words is None  # type: ignore[union-attr]
  x = Tensor(np.random.default_rng(0).standard_normal((2, a.cfg.dim)).astype(np.float32) * 4)
  la, lb = a._logits(x).numpy(), b._logits(x).numpy()
  np.testing.assert_allclose(la, lb, rtol=0, atol=2e-6 * np.abs(lb).max())
  assert (la.argmax(1) == lb.argmax(1)).all()

@needs_model
def test_decode_compiles_nothing_after_first_step(stories: LLM) -> None:
  m = stories.model
  logits = m.prefill([1, 403, 407])
  tok, counts = int(logits.argmax().item()), []
  m.step(tok, 3)  # the first decode step may compile
  runners = len(realize._runners)
  for pos in range(4, 12):
    k0 = GlobalCounters.kernel_count
    tok = int(m.step(tok, pos).argmax().item())
    counts.append(GlobalCounters.kernel_count - k0)
  assert len(realize._runners) == runners, "a decode step compiled a new kernel"
  assert len(set(counts)) == 1, counts
  # without the jit: the step function's graph, built anew for another position, schedules onto the same kernels
  from attograd.dtype import dtypes
  for pos in (12, 13):
    cos, sin = (Tensor(list(struct.unpack(f"{len(b) // 4}f", b)), dtype=dtypes.float32).reshape(1, 1, -1)
                for b in m._rope_bytes(pos, 1))
    x = Tensor(list(struct.unpack(f"{m.cfg.dim}f", m._embed([tok], 1)))).reshape(1, -1)
    outs = m.forward(x, m.pos.bind(pos), cos, sin, None)
    Tensor.realize(*outs)
    if pos == 12: runners = len(realize._runners)
  assert len(realize._runners) == runners

@needs_model
def test_decode_is_a_tinyjit_with_a_variable_position(stories: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
  m = stories.model
  logits = m.prefill([1, 403])
  tok = int(logits.argmax().item())
  for pos in (2, 3): tok = int(m.step(tok, pos).argmax().item())  # run, then capture
  jit = m._decode.jit
  assert isinstance(jit, TinyJit) and jit.captured is not None
  assert set(jit.captured.var_names) == {"pos"}  # the position is a kernel argument, not a constant
  assert m.pos.arg == ("pos", 0, m.max_context - 1)
  calls = {"schedule": 0, "compile": 0}
  def counting(name: str, real: Any) -> Any:
    def f(*a: Any, **k: Any) -> Any:
      calls[name] += 1
      return real(*a, **k)
    return f
  monkeypatch.setattr(tensor_mod, "create_schedule", counting("schedule", tensor_mod.create_schedule))
  monkeypatch.setattr(realize, "get_runner", counting("compile", realize.get_runner))
  cnt, runners, ids = jit.cnt, len(realize._runners), []
  for pos in range(4, 9):
    ids.append(tok)
    m.step(tok, pos)
    tok = m.greedy_token()  # the argmax computed in the step: reading it schedules nothing
  assert jit.cnt == cnt + 5 and calls == {"schedule": 0, "compile": 0} and len(realize._runners) == runners
  # the replays at different positions are right: the same tokens as stepping without the jit
  with Context(JIT=0):
    m.prefill([1, 403])
    t = int(m.step(int(logits.argmax().item()), 2).argmax().item())
    for pos in range(3, 9):
      if pos >= 4: assert t == ids[pos - 4]
      t = int(m.step(t, pos).argmax().item())
  assert t == tok

@needs_model
@pytest.mark.parametrize("n", [1, 13, 17, 64, 65, 150])  # one small chunk, two, one big padded, exact, big + small, ...
def test_prefill_equals_stepping(stories: LLM, n: int) -> None:
  # a prompt runs in chunks of 64 and 8 rows (the last one padded); feeding it one token at a time must give the
  # same logits
  llm = stories
  ids = (llm.encode("Once upon a time, there was a big dog. He liked to run and play in the park.") * 20)[:n]
  one_pass = llm.model.prefill(ids).numpy()
  logits = llm.model.prefill(ids[:1])
  for pos, t in enumerate(ids[1:], start=1): logits = llm.model.step(t, pos)
  np.testing.assert_allclose(logits.numpy(), one_pass, atol=2e-4, rtol=0)
  # and decoding after the prefill continues from the cache the prefill wrote
  after = llm.model.step(5, len(ids)).numpy()
  llm.model.prefill(ids)
  np.testing.assert_allclose(llm.model.step(5, len(ids)).numpy(), after, atol=2e-4, rtol=0)

@needs_model
def test_no_prompt_length_compiles_after_warm_up() -> None:
  # the prefill chunks and the decode step are compiled and captured once; prompts of any length reuse them
  llm = LLM.load(STORIES, max_context=256)
  llm.model.warm_up()
  runners = len(realize._runners)
  calls = {"schedule": 0}
  real = tensor_mod.create_schedule
  def counting(*a: Any, **k: Any) -> Any:
    calls["schedule"] += 1
    return real(*a, **k)
  tensor_mod.create_schedule = counting
  try:
    for n in (3, 9, 31, 64, 100, 200):
      llm.generate(llm.encode("Once upon a time " * 60)[:n], Sampler(), 3)
  finally: tensor_mod.create_schedule = real
  assert len(realize._runners) == runners and calls["schedule"] == 0

@needs_model
def test_decode_attends_over_filled_positions_only() -> None:
  # the cache rows past the filled positions are never read: NaN there changes nothing (a masked read of the whole
  # cache, as decoding did before, gets NaN from 0 * NaN in the value sum)
  llm = LLM.load(STORIES, max_context=64)
  m, ids = llm.model, [1, 403, 407, 261]
  m.prefill(ids[:2])
  clean = [m.step(t, p).numpy() for p, t in enumerate(ids[2:], start=2)]
  m.prefill(ids[:2])
  for c in m.cache_k + m.cache_v:
    rows = np.zeros(c.shape, np.float32)
    rows[:, 2:] = np.nan
    c.assign(Tensor(rows, device=c.device) + c).realize()
  for (p, t), want in zip(enumerate(ids[2:], start=2), clean):
    np.testing.assert_allclose(m.step(t, p).numpy(), want, atol=1e-5, rtol=0)

@needs_model
def test_stream_stops_and_bounds(stories: LLM) -> None:
  with pytest.raises(ValueError, match="more than the context"):
    stories.generate([1] * (stories.model.max_context + 1), Sampler(), 4)
  text = stories.generate([1], Sampler(), 40, stop=["Lily"])
  assert text == "Once upon a time, there was a little girl named " and stories.stats.finish_reason == "stop"
  a = stories.generate(stories.encode("Once"), Sampler(temperature=0.9, top_k=20, seed=3), 30)
  b = stories.generate(stories.encode("Once"), Sampler(temperature=0.9, top_k=20, seed=3), 30)
  assert a == b and len(a) > 20

@needs_model
def test_cli_streams_and_reports(tmp_path: os.PathLike) -> None:
  env = {**os.environ, "PYTHONPATH": ROOT}
  r = subprocess.run([sys.executable, "-m", "attograd.llm", "--model", STORIES, "--prompt", "Once upon a time",
                      "--max-tokens", "30", "--temperature", "0"], capture_output=True, text=True, env=env, timeout=300)
  assert r.returncode == 0, r.stderr
  assert r.stdout.startswith("Once upon a time, there was a little girl"), r.stdout
  assert "prefill" in r.stderr and "decode" in r.stderr and "tok/s" in r.stderr
  bad = subprocess.run([sys.executable, "-m", "attograd.llm", "--model", STORIES, "--prompt", "x", "--top-p", "2"],
                       capture_output=True, text=True, env=env, timeout=300)
  assert bad.returncode != 0 and "top_p" in bad.stderr

# ***** synthetic models against a NumPy forward pass *****

def _np_forward(cfg: LlamaConfig, w: dict[str, object], tokens: list[int]) -> object:
  """Logits (T, V) of every position, written plainly: no cache, no fusing, float64."""
  W = {k: np.asarray(v, dtype=np.float64) for k, v in w.items()}
  T, H, Hkv, D, R = len(tokens), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rotary_dim
  def rms(x, g): return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.norm_eps) * g
  def rope(x):  # (T, heads, D)
    out = x.copy()
    for p in range(T):
      for i in range(R // 2):
        ang = p * cfg.rope_theta ** (-2 * i / R)
        a, b = (2 * i, 2 * i + 1) if cfg.rope_style == "normal" else (i, i + R // 2)
        out[p, :, a] = x[p, :, a] * math.cos(ang) - x[p, :, b] * math.sin(ang)
        out[p, :, b] = x[p, :, a] * math.sin(ang) + x[p, :, b] * math.cos(ang)
    return out
  x = W["token_embd.weight"][tokens]
  for i in range(cfg.n_layers):
    p = f"blk.{i}."
    h = rms(x, W[p + "attn_norm.weight"])
    q, k, v = (h @ W[p + f"attn_{n}.weight"].T + W.get(p + f"attn_{n}.bias", 0.0) for n in "qkv")
    q, k, v = rope(q.reshape(T, H, D)), rope(k.reshape(T, Hkv, D)), v.reshape(T, Hkv, D)
    o = np.zeros((T, H, D))
    for hh in range(H):
      kv = hh // (H // Hkv)
      s = q[:, hh] @ k[:, kv].T / math.sqrt(D) + np.triu(np.full((T, T), -np.inf), 1)
      e = np.exp(s - s.max(-1, keepdims=True))
      o[:, hh] = (e / e.sum(-1, keepdims=True)) @ v[:, kv]
    x = x + o.reshape(T, H * D) @ W[p + "attn_output.weight"].T
    h = rms(x, W[p + "ffn_norm.weight"])
    g = h @ W[p + "ffn_gate.weight"].T
    x = x + (g / (1 + np.exp(-g)) * (h @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
  return rms(x, W["output_norm.weight"]) @ W.get("output.weight", W["token_embd.weight"]).T

def _random_weights(cfg: LlamaConfig, bias: bool, tied: bool, seed: int) -> dict[str, object]:
  rng = np.random.default_rng(seed)
  C, H, Hkv, D, F, V = cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.hidden_dim, cfg.vocab_size
  def r(*s): return (rng.standard_normal(s) * 0.3).astype(np.float32)
  w = {"token_embd.weight": r(V, C), "output_norm.weight": 1 + r(C)}
  if not tied: w["output.weight"] = r(V, C)
  for i in range(cfg.n_layers):
    p = f"blk.{i}."
    w.update({p + "attn_norm.weight": 1 + r(C), p + "ffn_norm.weight": 1 + r(C), p + "attn_q.weight": r(H * D, C),
              p + "attn_k.weight": r(Hkv * D, C), p + "attn_v.weight": r(Hkv * D, C),
              p + "attn_output.weight": r(C, H * D),
              p + "ffn_gate.weight": r(F, C), p + "ffn_up.weight": r(F, C), p + "ffn_down.weight": r(C, F)})
    if bias: w.update({p + "attn_q.bias": r(H * D), p + "attn_k.bias": r(Hkv * D), p + "attn_v.bias": r(Hkv * D)})
  return w

@pytest.mark.parametrize("arch,bias,tied,rope_dim", [("llama", False, False, 0), ("qwen2", True, True, 0),
                                                      ("llama", False, True, 4)])
def test_synthetic_models_match_numpy(arch: str, bias: bool, tied: bool, rope_dim: int) -> None:
  kv = {"general.architecture": arch, f"{arch}.embedding_length": 24, f"{arch}.block_count": 2,
        f"{arch}.attention.head_count": 6, f"{arch}.attention.head_count_kv": 2, f"{arch}.feed_forward_length": 40,
        f"{arch}.context_length": 32, f"{arch}.rope.freq_base": 500.0, f"{arch}.attention.layer_norm_rms_epsilon": 1e-6}
  if rope_dim: kv[f"{arch}.rope.dimension_count"] = rope_dim
  probe = {"token_embd.weight": Tensor.zeros(50, 24)}
  cfg = LlamaConfig.from_gguf(kv, probe)
  assert (cfg.head_dim, cfg.rope_style, cfg.rotary_dim) == (4, "neox" if arch == "qwen2" else "normal", rope_dim or 4)
  w = _random_weights(cfg, bias, tied, seed=len(arch) + rope_dim)
  model = Llama(cfg, {k: Tensor(v) for k, v in w.items()}, max_context=16)
  tokens = [3, 17, 42, 8, 8, 1, 30, 49, 0, 11]
  want = _np_forward(cfg, w, tokens)
  np.testing.assert_allclose(model.prefill(tokens[:7]).numpy(), want[6], atol=1e-4, rtol=1e-4)
  for pos in range(7, len(tokens)):
    np.testing.assert_allclose(model.step(tokens[pos], pos).numpy(), want[pos], atol=1e-4, rtol=1e-4)
  with pytest.raises(ValueError, match="outside the context"): model.step(1, 16)
  with pytest.raises(ValueError, match="outside the vocabulary"): model.step(50, 10)

@pytest.mark.parametrize("V,case", [(49152, "random"), (512, "ties"), (1000, "nan"), (384, "flat"), (100, "random")])
def test_greedy_is_the_first_argmax(V: int, case: str) -> None:
  # the two-step argmax of the decode step: the first maximum, the first NaN when there is one, as Tensor.argmax
  from attograd.llm.model import greedy
  x = np.random.default_rng(V).standard_normal(V).astype(np.float32)
  if case == "ties": x[[5, 300, V - 1]] = 9.0
  if case == "nan": x[[V // 2, V // 3]] = np.nan
  if case == "flat": x[:] = 1.0
  want = int(np.argmax(x)) if case != "nan" else V // 3
  assert greedy(Tensor(x)).item() == want == Tensor(x).argmax().item()

def test_config_errors() -> None:
  emb = {"token_embd.weight": Tensor.zeros(10, 8)}
  with pytest.raises(ValueError, match="not supported"): LlamaConfig.from_gguf({"general.architecture": "gpt2"}, emb)
  with pytest.raises(ValueError, match="lacks llama.block_count"):
    kv = {"general.architecture": "llama", "llama.embedding_length": 8, "llama.attention.head_count": 2}
    LlamaConfig.from_gguf(kv, emb)
  with pytest.raises(ValueError, match="multiple"):
    LlamaConfig(dim=8, n_layers=1, n_heads=3, n_kv_heads=2, head_dim=4, hidden_dim=8, vocab_size=10, context_length=8)
  cfg = LlamaConfig(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, hidden_dim=8, vocab_size=10,
                    context_length=8)
  w = _random_weights(cfg, False, False, 0)
  del w["blk.0.ffn_up.weight"]
  with pytest.raises(ValueError, match="missing weight 'blk.0.ffn_up.weight'"):
    Llama(cfg, {k: Tensor(v) for k, v in w.items()})
