"""Llama-family decoder-only transformers (llama 1/2/3, mistral, qwen2) built from GGUF metadata and weights, with a
KV cache, a one-pass prefill and a jitted decode step whose position is a Variable: its kernels are the same for every
token."""
from __future__ import annotations
import math, os
from array import array
from dataclasses import dataclass
from typing import Any, Callable
from attograd.device import Buffer, Device
from attograd.dtype import dtypes
from attograd.engine.jit import TinyJit
from attograd.engine.schedule import buffers
from attograd.helpers import prod
from attograd.nn.gguf import QuantizedTensor
from attograd.tensor import Tensor
from attograd.uop.ops import Ops, UOp, Variable

# llama.cpp's rope types: "normal" rotates consecutive pairs (x0, x1), (x2, x3), ...; "neox" rotates x[i] with
# x[i + d/2]. The llama converter permutes Q/K rows so that normal mode is right for "llama" GGUFs.
ROPE_STYLE: dict[str, str] = {"llama": "normal", "mistral": "normal", "qwen2": "neox"}

@dataclass(frozen=True)
class LlamaConfig:
  """Shapes and constants of one model; `from_gguf` reads them from a GGUF file's metadata."""
  dim: int  # C, the width of the residual stream
  n_layers: int
  n_heads: int  # H query heads
  n_kv_heads: int  # Hkv key/value heads (GQA: H is a multiple of Hkv)
  head_dim: int  # D
  hidden_dim: int  # F, the SwiGLU width
  vocab_size: int  # V
  context_length: int
  norm_eps: float = 1e-5
  rope_theta: float = 10000.0
  rope_dim: int = 0  # how many of the D dims rotate; 0 means all
  rope_style: str = "normal"
  rope_scale: float = 1.0  # linear position scaling: positions are divided by it
  arch: str = "llama"

  def __post_init__(self) -> None:
    if self.n_heads % self.n_kv_heads:
      raise ValueError(f"LlamaConfig: n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")
    if self.rope_style not in ("normal", "neox"):
      raise ValueError(f"LlamaConfig: unknown rope_style {self.rope_style!r}")
    if self.rotary_dim % 2 or self.rotary_dim > self.head_dim:
      raise ValueError(f"LlamaConfig: rope_dim={self.rope_dim} must be even and at most head_dim={self.head_dim}")
  @property
  def rotary_dim(self) -> int: return self.rope_dim or self.head_dim

  @staticmethod
  def from_gguf(kv: dict[str, Any], tensors: dict[str, Tensor]) -> LlamaConfig:
    arch = kv.get("general.architecture")
    if arch not in ROPE_STYLE:
      raise ValueError(f"LlamaConfig: architecture {arch!r} is not supported; supported: {sorted(ROPE_STYLE)}")
    def get(key: str, default: Any = None) -> Any:
      if (v := kv.get(f"{arch}.{key}", default)) is None:
        raise ValueError(f"LlamaConfig: GGUF metadata lacks {arch}.{key}")
      return v
    dim, n_heads = get("embedding_length"), get("attention.head_count")
    head_dim = get("attention.key_length", dim // n_heads)
    scaling = get("rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
      raise ValueError(f"LlamaConfig: rope scaling {scaling!r} is not supported (only none and linear)")
    if "token_embd.weight" not in tensors:
      raise ValueError("LlamaConfig: the GGUF file has no token_embd.weight tensor")
    return LlamaConfig(dim=dim, n_layers=get("block_count"), n_heads=n_heads,
                       n_kv_heads=get("attention.head_count_kv", n_heads), head_dim=head_dim,
                       hidden_dim=get("feed_forward_length"), vocab_size=tensors["token_embd.weight"].shape[0],
                       context_length=get("context_length", 2048),
                       norm_eps=get("attention.layer_norm_rms_epsilon", 1e-5),
                       rope_theta=get("rope.freq_base", 10000.0), rope_dim=get("rope.dimension_count", head_dim),
                       rope_style=ROPE_STYLE[arch], arch=arch,
                       rope_scale=get("rope.scaling.factor", 1.0) if scaling == "linear" else 1.0)

# ***** the math, as Tensor functions of Tensors *****

Weight = Tensor | QuantizedTensor

def dense(w: Weight) -> Tensor:
  """A weight as a float32 Tensor: a quantized one dequantized into a buffer of its own (an intermediate of the
  kernels that read it, freed after them), so a several-row matmul dequantizes each block once, not once per row."""
  return w.dequantize().contiguous() if isinstance(w, QuantizedTensor) else w

def linear(x: Tensor, w: Weight, block_bytes: int = 4 << 20) -> Tensor:
  """x (T, K) @ w.T for w (N, K), as one broadcast multiply and sum (fewer graph nodes than matmul's transposes).
  With several rows, w is cut into blocks of output columns of about block_bytes: each block's matmul then reads its
  weights from cache for every row tile, instead of streaming the whole matrix from memory again and again.
  A quantized w with one row of x is dequantized inside the matmul's kernel (the float weights never exist); the
  sum runs over (blocks, elements of a block), so each element's block is an index, not a division."""
  T, K = x.shape
  if isinstance(w, QuantizedTensor):
    if T > 1: return linear(x, dense(w), block_bytes)
    N, nbr, E = w.shape[0], K // w.block_elems, w.block_elems
    return (x.reshape(1, 1, nbr, E) * w.blockwise().reshape(1, N, nbr, E)).sum((-2, -1))
  N = w.shape[0]
  rows = max(16, block_bytes // (K * w.dtype.itemsize) // 16 * 16)
  if T == 1 or N <= rows: return (x.reshape(T, 1, K) * w.reshape(1, N, K)).sum(-1)
  # contiguous: a consumer would otherwise read every element through the concatenation's per-block conditions
  return Tensor.cat(*[linear(x, w[i:min(i + rows, N)], block_bytes) for i in range(0, N, rows)], dim=-1).contiguous()

def rope(x: Tensor, cos: Tensor, sin: Tensor, style: str) -> Tensor:
  """Rotate pairs of dims of x (T, heads, D): out = x * cos + swap(x) * sin, where swap exchanges the two members of
  each pair (consecutive dims for "normal", the two halves for "neox") and sin carries the sign (-s for the first
  member). cos and sin are (T, 1, D), with cos 1 and sin 0 on dims that don't rotate (partial rotary)."""
  T, nh, D = x.shape
  R = cos.shape[-1]
  if R != D:  # partial rotary: only the leading R dims rotate
    return rope(x[:, :, :R], cos, sin, style).cat(x[:, :, R:], dim=-1)
  swapped = x.reshape(T, nh, D // 2, 2).flip(-1) if style == "normal" else x.reshape(T, nh, 2, D // 2).flip(2)
  return x * cos + swapped.reshape(T, nh, D) * sin

def attend(scores: Tensor, v: Tensor) -> Tensor:
  """softmax(scores) @ v, normalized after the matmul: the probabilities never need their own buffer."""
  # e gets its own buffer: read by the value matmul, each exp would otherwise be recomputed for every output dim
  e = (scores - scores.max(-1, keepdim=True)).exp().contiguous()
  return (e @ v) / e.sum(-1, keepdim=True)

@dataclass
class Layer:
  attn_norm: Tensor
  wqkv: Weight  # (H*D + 2*Hkv*D, C): Q, K and V stacked, one matmul
  bqkv: Tensor | None
  wo: Weight  # (C, H*D)
  ffn_norm: Tensor
  wgate_up: Weight  # (2F, C): gate and up stacked
  wdown: Weight  # (C, F)

def stack_rows(*ws: Weight) -> Weight:
  """Weights stacked along their rows, realized: quantized ones of one type stay quantized (their blocks stacked)."""
  if all(isinstance(w, QuantizedTensor) for w in ws) and len({w.qtype for w in ws}) == 1:  # type: ignore[union-attr]
    q = ws[0]
    assert isinstance(q, QuantizedTensor)
    if any(w.split is not None for w in ws): raise ValueError("stack_rows: stack quantized weights before realize()")
    blocks = Tensor.cat(*[w.blocks for w in ws])  # type: ignore[union-attr]
    return QuantizedTensor(blocks, q.qtype, (blocks.shape[0], q.shape[1])).realize()
  return Tensor.cat(*[w.float() for w in ws]).realize()

class EmbeddingRows:
  """Rows of a quantized embedding table as float32 bytes: the rows' raw blocks are read on the host (from the
  file's mapping) and dequantized by a small jitted kernel per row count, so the table is never widened."""
  def __init__(self, table: QuantizedTensor, device: str):
    self.table, self.device = table, device
    self.runs: dict[int, tuple[Tensor, Buffer, TinyJit]] = {}
  def __call__(self, tokens: list[int], T: int) -> bytes:
    if (run := self.runs.get(T)) is None:
      _, nbr, bsz = self.table.blocks.shape
      inp = Tensor.empty(T, nbr, bsz, dtype=dtypes.uint8, device=self.device)
      qtype, shape = self.table.qtype, (T, self.table.shape[1])
      run = self.runs[T] = (inp, buffers[inp.uop.base], TinyJit(lambda b: QuantizedTensor(b, qtype, shape).dequantize()
                                                                 .contiguous().realize()))
    inp, buf, jit = run
    raw = b"".join(self.table.row_bytes(t) for t in tokens)
    buf.copyin(memoryview(raw + bytes(buf.nbytes - len(raw))))  # zero blocks dequantize to zero rows
    buf.version += 1
    return jit(inp)._raw()

class Llama:
  """A llama-family model with a KV cache of `max_context` positions.

  Decoding attends over the whole cache with masks built from a position Variable (a kernel argument, not a
  constant), so every decode step runs the same kernels: a TinyJit captures them once and replays them for every
  later token, with nothing scheduled or compiled. A prompt runs as one prefill pass, padded to a power of two
  length: one TinyJit per length bucket, its last real row a Variable too.
  """
  def __init__(self, cfg: LlamaConfig, weights: dict[str, Tensor], max_context: int | None = None,
               progress: Callable[[int, int, str], None] | None = None):
    self.cfg = cfg
    self.max_context = min(max_context or cfg.context_length, cfg.context_length)
    if self.max_context < 1: raise ValueError(f"Llama: max_context must be at least 1, got {max_context}")
    self.device = Device.DEFAULT
    steps = 4 + cfg.n_layers
    done = [0]
    def tick(name: str) -> None:
      done[0] += 1
      if progress is not None: progress(done[0], steps, name)
    def w(name: str) -> Any:
      if name not in weights: raise ValueError(f"Llama: missing weight {name!r}")
      t = weights[name]
      # a quantized weight stays quantized on the device; its blocks are copied there now (realized)
      return t.to(self.device) if isinstance(t, QuantizedTensor) else t.to(self.device).float()
    def need(t: Any, shape: tuple[int, ...], name: str) -> Any:
      if t.shape != shape: raise ValueError(f"Llama: {name} has shape {t.shape}, expected {shape} from the config")
      return t
    C, H, Hkv, D, F, V = cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.hidden_dim, cfg.vocab_size
    # token embeddings are looked up on the host: a device gather would read the whole table for every token
    table = need(weights["token_embd.weight"], (V, C), "token_embd.weight")
    self._embedding: bytes | None = None
    self._embedding_rows: EmbeddingRows | None = None
    if isinstance(table, QuantizedTensor):
      self._embedding_rows = EmbeddingRows(table, self.device)
      emb: Any = w("token_embd.weight").realize() if "output.weight" not in weights else None  # tied: output reads it
    else:
      emb = w("token_embd.weight").realize()
      self._embedding = emb._raw()
    tick("token_embd.weight")
    self.output_norm = need(w("output_norm.weight"), (C,), "output_norm.weight").realize()
    tick("output_norm.weight")
    self.output = need(w("output.weight"), (V, C), "output.weight").realize() if "output.weight" in weights else emb
    tick("output.weight")
    self.layers: list[Layer] = []
    for i in range(cfg.n_layers):
      p = f"blk.{i}."
      q, k, v = (need(w(p + f"attn_{n}.weight"), (rows * D, C), p + f"attn_{n}.weight")
                 for n, rows in (("q", H), ("k", Hkv), ("v", Hkv)))
      bias = None
      if p + "attn_q.bias" in weights:
        bias = w(p + "attn_q.bias").cat(w(p + "attn_k.bias"), w(p + "attn_v.bias")).realize()
      gate, up = (need(w(p + f"ffn_{n}.weight"), (F, C), p + f"ffn_{n}.weight") for n in ("gate", "up"))
      self.layers.append(Layer(
        attn_norm=need(w(p + "attn_norm.weight"), (C,), p + "attn_norm.weight").realize(),
        wqkv=stack_rows(q, k, v), bqkv=bias,
        wo=need(w(p + "attn_output.weight"), (C, H * D), p + "attn_output.weight").realize(),
        ffn_norm=need(w(p + "ffn_norm.weight"), (C,), p + "ffn_norm.weight").realize(), wgate_up=stack_rows(gate, up),
        wdown=need(w(p + "ffn_down.weight"), (C, F), p + "ffn_down.weight").realize()))
      tick(f"blk.{i}")
    # llama 3 files carry per-frequency divisors for long-context rope scaling
    factors = w("rope_freqs.weight").tolist() if "rope_freqs.weight" in weights else None
    R = cfg.rotary_dim // 2
    self._inv_freq = [cfg.rope_theta ** (-2 * i / cfg.rotary_dim) / (factors[i] if factors else 1.0) / cfg.rope_scale
                      for i in range(R)]
    self._rope_cache: dict[int, tuple[bytes, bytes]] = {}
    # the KV cache, zeros: masked positions must stay finite (0 * nan would poison the attention sum)
    shape = (cfg.n_kv_heads, self.max_context, cfg.head_dim)
    self.cache_k = [Tensor.zeros(*shape, device=self.device).contiguous().realize() for _ in self.layers]
    self.cache_v = [Tensor.zeros(*shape, device=self.device).contiguous().realize() for _ in self.layers]
    self.pos = Variable("pos", 0, self.max_context - 1)  # the decode step's position
    self.last = Variable("last", 0, self.max_context - 1)  # the prefill's last real row
    self._decode: Step | None = None
    self._prefills: dict[int, Step] = {}
    self._argmax: Buffer | None = None  # where the last call left its greedy token
    tick("kv cache")

  @staticmethod
  def from_gguf(path: str | os.PathLike, max_context: int | None = None,
                progress: Callable[[int, int, str], None] | None = None) -> tuple[Llama, dict[str, Any]]:
    """The model in a GGUF file and the file's metadata (which holds the tokenizer)."""
    from attograd.nn.state import gguf_load
    kv, tensors = gguf_load(path, quantized=True)
    return Llama(LlamaConfig.from_gguf(kv, tensors), tensors, max_context, progress), kv

  # ***** host-side inputs: embedding rows and rope angles, as bytes *****

  def _embed(self, tokens: list[int], T: int) -> bytes:
    """The embedding rows of tokens, then zero rows up to T."""
    C, V = self.cfg.dim, self.cfg.vocab_size
    for t in tokens:
      if not isinstance(t, int) or not 0 <= t < V:
        raise ValueError(f"Llama: token id {t!r} is outside the vocabulary [0, {V})")
    if self._embedding is None:
      assert self._embedding_rows is not None
      return self._embedding_rows(tokens, T)
    return b"".join(self._embedding[t * C * 4:(t + 1) * C * 4] for t in tokens) + bytes(4 * C * (T - len(tokens)))
  def _angles(self, pos: int) -> tuple[bytes, bytes]:
    """cos and sin for every rotated dim at one position, laid out as `rope` wants them."""
    if (hit := self._rope_cache.get(pos)) is None:
      c = [math.cos(pos * f) for f in self._inv_freq]
      s = [math.sin(pos * f) for f in self._inv_freq]
      if self.cfg.rope_style == "normal":
        cos, sin = [v for v in c for _ in (0, 1)], [v for x in s for v in (-x, x)]
      else: cos, sin = c + c, [-x for x in s] + s
      hit = self._rope_cache[pos] = (array("f", cos).tobytes(), array("f", sin).tobytes())
    return hit
  def _rope_bytes(self, start: int, T: int) -> tuple[bytes, bytes]:
    angles = [self._angles(p) for p in range(start, start + T)]
    return b"".join(c for c, _ in angles), b"".join(s for _, s in angles)

  # ***** the forward passes *****

  def _norm_matmul(self, x: Tensor, norm: Tensor, w: Tensor) -> Tensor:
    """rms_norm(x) @ w.T (RMSNorm with weight `norm`), the per-row scale applied after the matmul: no extra kernel."""
    return linear(x * norm, w) * self._rms_scale(x)
  def _rms_scale(self, x: Tensor) -> Tensor: return (x.square().mean(-1, keepdim=True) + self.cfg.norm_eps).rsqrt()

  def _block_input(self, layer: Layer, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q (T, H, D), k and v (T, Hkv, D) of one layer, with rope applied."""
    cfg = self.cfg
    T, H, Hkv, D = x.shape[0], cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    if T == 1:  # one matmul for q, k and v, one rope for q and k
      qkv = self._norm_matmul(x, layer.attn_norm, layer.wqkv)
      if layer.bqkv is not None: qkv = qkv + layer.bqkv
      qk = rope(qkv[:, :(H + Hkv) * D].reshape(T, H + Hkv, D), cos, sin, cfg.rope_style)
      return qk[:, :H], qk[:, H:], qkv[:, (H + Hkv) * D:].reshape(T, Hkv, D)
    # several rows: separate matmuls, so no consumer reads through a concatenation of column blocks
    xn, scale = x * layer.attn_norm, self._rms_scale(x)
    outs, wqkv = [], dense(layer.wqkv)
    for lo, hi in ((0, H * D), (H * D, (H + Hkv) * D), ((H + Hkv) * D, (H + 2 * Hkv) * D)):
      y = linear(xn, wqkv[lo:hi]) * scale
      outs.append(y if layer.bqkv is None else y + layer.bqkv[lo:hi])
    q, k, v = outs[0].reshape(T, H, D), outs[1].reshape(T, Hkv, D), outs[2].reshape(T, Hkv, D)
    return rope(q, cos, sin, cfg.rope_style), rope(k, cos, sin, cfg.rope_style), v

  def _block_output(self, layer: Layer, x: Tensor, attn: Tensor, block_bytes: int = 2 << 20) -> Tensor:
    x = x + linear(attn, layer.wo)
    T, C, F = x.shape[0], self.cfg.dim, self.cfg.hidden_dim
    if T == 1:
      gu = self._norm_matmul(x, layer.ffn_norm, layer.wgate_up)
      return x + linear(gu[:, :F].silu() * gu[:, F:], layer.wdown)
    # several rows: the FFN in blocks of hidden units whose gate, up and down weights fit in cache; the down
    # projection of each block is a partial sum, so no block's output is ever concatenated
    xn, scale = x * layer.ffn_norm, self._rms_scale(x)
    wgate_up, wdown = dense(layer.wgate_up), dense(layer.wdown)
    n_blocks = -(-F * C * 4 // block_bytes)
    step = -(-F // n_blocks // 16) * 16
    out = x
    for lo in range(0, F, step):
      hi = min(lo + step, F)
      # gate in its own kernel: fused with up's, the two matmuls' accumulators don't fit in registers
      gate = linear(xn, wgate_up[lo:hi]).contiguous() * scale
      up = linear(xn, wgate_up[F + lo:F + hi]) * scale
      out = out + linear(gate.silu() * up, wdown[:, lo:hi])
    return out

  def _logits(self, x: Tensor) -> Tensor: return self._norm_matmul(x, self.output_norm, self.output)

  def decode_step(self, x: Tensor, pos: UOp | Tensor, cos: Tensor, sin: Tensor) -> list[Tensor]:
    """One token: x (1, C) at position pos (a bound Variable, or an int32 tensor of shape (1,)) -> [logits (V,), their
    argmax (the greedy token, so greedy decoding reads back 4 bytes), then the cache writes]. Every shape is fixed
    and the position only enters as a value, so every call runs the same kernels."""
    cfg = self.cfg
    H, Hkv, D, S = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, self.max_context
    g = H // Hkv
    ar = Tensor.arange(S, device=self.device, dtype=dtypes.int32)
    here = (ar == pos).reshape(1, S, 1)  # the cache row this token writes
    visible = (ar <= pos).reshape(1, 1, S)
    writes = []
    for layer, ck, cv in zip(self.layers, self.cache_k, self.cache_v):
      q, k, v = self._block_input(layer, x, cos, sin)
      ck = assign_later(ck, here.where(k.reshape(Hkv, 1, D), ck))  # (Hkv, S, D)
      cv = assign_later(cv, here.where(v.reshape(Hkv, 1, D), cv))
      scores = (q.reshape(Hkv, g, D) @ ck.transpose(1, 2)) * (1 / math.sqrt(D))  # (Hkv, g, S)
      attn = attend(visible.where(scores, -math.inf), cv).reshape(1, H * D)  # (Hkv, g, D) -> (1, C)
      x = self._block_output(layer, x, attn)
      writes += [ck, cv]
    logits = self._logits(x).reshape(cfg.vocab_size)
    return [logits, logits.argmax()] + writes

  def prefill_step(self, x: Tensor, last: UOp | Tensor, cos: Tensor, sin: Tensor) -> list[Tensor]:
    """A prompt from position 0: x (T, C) -> [the logits (V,) at row `last` (a bound Variable), their
    argmax, then the cache writes]. Rows after `last` are padding: causal masking keeps them out of the real rows,
    and decoding overwrites them in the cache before it looks at them."""
    cfg = self.cfg
    T, H, Hkv, D, S = x.shape[0], cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, self.max_context
    g = H // Hkv
    causal = Tensor.full((T, T), True, dtype=dtypes.bool, device=self.device).tril()
    writes = []
    for layer, ck, cv in zip(self.layers, self.cache_k, self.cache_v):
      q, k, v = self._block_input(layer, x, cos, sin)
      k, v = k.permute(1, 0, 2), v.permute(1, 0, 2)  # (Hkv, T, D)
      qh = q.reshape(T, Hkv, g, D).permute(1, 2, 0, 3)  # (Hkv, g, T, D)
      scores = (qh @ k.reshape(Hkv, 1, T, D).transpose(2, 3)) * (1 / math.sqrt(D))  # (Hkv, g, T, T)
      attn = attend(causal.where(scores, -math.inf), v.reshape(Hkv, 1, T, D)).permute(2, 0, 1, 3).reshape(T, H * D)
      attn = attn.contiguous()  # rows in (T, C) order: the output projection's matmul then reads them with vector loads
      x = self._block_output(layer, x, attn)
      writes += [assign_later(ck, k.pad((None, (0, S - T), None))), assign_later(cv, v.pad((None, (0, S - T), None)))]
    pick = (Tensor.arange(T, device=self.device, dtype=dtypes.int32) == last).reshape(T, 1)
    logits = self._logits(pick.where(x, 0.0).sum(0, keepdim=True)).reshape(cfg.vocab_size)
    return [logits, logits.argmax()] + writes

  # ***** token-level driver *****

  def prefill(self, tokens: list[int]) -> Tensor:
    """Run a prompt from position 0 (what the cache held before is dropped); the logits (V,) after its last token."""
    n = len(tokens)
    if n == 0: raise ValueError("Llama.prefill: the prompt has no tokens")
    if n > self.max_context:
      raise ValueError(f"Llama.prefill: the prompt has {n} tokens, more than the context {self.max_context}")
    T = min(max(8, 1 << (n - 1).bit_length()), self.max_context)
    if (run := self._prefills.get(T)) is None:
      R = self.cfg.rotary_dim
      run = self._prefills[T] = Step(self.prefill_step, [(T, self.cfg.dim), (T, 1, R), (T, 1, R)], self.device)
    cos, sin = self._rope_bytes(0, T)
    return self._result(run(self._embed(tokens, T), self.last.bind(n - 1), cos, sin))

  def step(self, token: int, pos: int) -> Tensor:
    """Feed one token at position pos (the cache must hold positions 0..pos-1); the logits (V,) after it."""
    if not 0 <= pos < self.max_context:
      raise ValueError(f"Llama.step: position {pos} is outside the context [0, {self.max_context})")
    if self._decode is None:
      R = self.cfg.rotary_dim
      self._decode = Step(self.decode_step, [(1, self.cfg.dim), (1, 1, R), (1, 1, R)], self.device)
    cos, sin = self._rope_bytes(pos, 1)
    return self._result(self._decode(self._embed([token], 1), self.pos.bind(pos), cos, sin))

  def _result(self, outs: tuple[Tensor, Tensor]) -> Tensor:
    self._argmax = buffers[outs[1].uop.base]
    return outs[0]

  def greedy_token(self) -> int:
    """The argmax of the logits the last prefill or step returned (computed with them: no extra kernel)."""
    if self._argmax is None: raise RuntimeError("Llama.greedy_token: nothing has run yet")
    return int.from_bytes(self._argmax.as_bytes(), "little", signed=True)

class Step:
  """A jitted step function of float32 inputs of fixed shapes, fed raw bytes, and one bound Variable. The inputs are
  Tensors of their own: each call copies new bytes into their buffers, so the TinyJit replays its kernels on the same
  buffers with the Variable's new value. The function returns [result, its argmax, then in-place writes]; a call
  realizes them all and returns the first two."""
  def __init__(self, fn: Callable[..., list[Tensor]], shapes: list[tuple[int, ...]], device: str):
    self.fn = fn
    self.inputs = [Tensor.empty(*shape, dtype=dtypes.float32, device=device) for shape in shapes]
    self.bufs: list[Buffer] = [buffers[t.uop.base] for t in self.inputs]
    self.jit = TinyJit(self._run)

  def _run(self, x: Tensor, var: UOp, *rest: Tensor) -> tuple[Tensor, Tensor]:
    outs = self.fn(x, var, *rest)
    outs[0].realize(*outs[1:])  # the writes are realized here, so the jit doesn't rebuild Tensors for them
    return outs[0], outs[1]

  def __call__(self, x: bytes, var: UOp, *rest: bytes) -> tuple[Tensor, Tensor]:
    for buf, data in zip(self.bufs, (x, *rest)):
      buf.copyin(memoryview(data))
      buf.version += 1  # results computed from the old bytes are stale
    return self.jit(self.inputs[0], var, *self.inputs[1:])

def assign_later(target: Tensor, value: Tensor) -> Tensor:
  """`value` written into target's buffer when the result is realized (Tensor.assign writes at once). The value may
  read the target only at the position it writes."""
  if target.uop.base.op is not Ops.BUFFER or prod(target.shape) != target.uop.base.arg[1]:
    raise ValueError(f"assign_later: the target must be a whole realized buffer, got {target.uop.op}")
  if value.shape != target.shape or value.dtype != target.dtype:
    raise ValueError(f"assign_later: target is {target.shape} {target.dtype}, value {value.shape} {value.dtype}")
  return target._new(UOp(Ops.ASSIGN, target.dtype, (target.uop, value.uop)))
