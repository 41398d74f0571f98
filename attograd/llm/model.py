"""Llama-family decoder-only transformers (llama 1/2/3, mistral, qwen2) built from GGUF metadata and weights, with a
KV cache, a one-pass prefill and a jitted decode step whose position is a Variable: its kernels are the same for every
token."""
from __future__ import annotations
import math, os
from array import array
from dataclasses import dataclass
from typing import Any, Callable
from attograd.device import Buffer, Device
from attograd.dtype import DType, dtypes
from attograd.tensor.jit import TinyJit
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

def linear(x: Tensor, w: Weight, block_bytes: int = 4 << 20, int8: bool = True) -> Tensor:
  """x (T, K) @ w.T for w (N, K), as one broadcast multiply and sum (fewer graph nodes than matmul's transposes).
  With several rows, w is cut into blocks of output columns of about block_bytes: each block's matmul then reads its
  weights from cache for every row tile, instead of streaming the whole matrix from memory again and again.
  A quantized w with one row of x is dequantized inside the matmul's kernel (the float weights never exist); the
  sum runs over (blocks, the fields of a block: QuantizedTensor.blockwise), so each element's block and field are
  indices, not divisions."""
  T, K = x.shape
  if isinstance(w, QuantizedTensor):
    # int8 activations (QuantizedTensor.dot) where w has their layout (and int8: not for a prompt), any number of
    # rows: each weight word is loaded once for up to 8 of them
    if w.words is not None and int8: return w.dot(x)
    if T > 1 or w.words is not None: return linear(x, dense(w), block_bytes)
    N, nbr, bs = w.shape[0], K // w.block_elems, w.block_shape
    axes = tuple(range(-1 - len(bs), 0))  # the blocks and each block's fields
    return (x.reshape(1, 1, nbr, *bs) * w.blockwise().reshape(1, N, nbr, *bs)).sum(axes)
  N = w.shape[0]
  rows = max(16, block_bytes // (K * w.dtype.itemsize) // 16 * 16)
  if T == 1 or N <= rows: return (x.reshape(T, 1, K) * w.reshape(1, N, K)).sum(-1)
  # contiguous: a consumer would otherwise read every element through the concatenation's per-block conditions
  return Tensor.cat(*[linear(x, w[i:min(i + rows, N)], block_bytes) for i in range(0, N, rows)], dim=-1).contiguous()

def greedy(logits: Tensor, row: int = 128) -> Tensor:
  """logits.argmax() (the first maximum; the first NaN if any) in two steps: the first maximum of each row of `row`
  logits, then of the rows' maxima. A reduce to one value runs as one serial loop (no vector lanes: SmolLM2's 49152
  logits took 150 us); rows of them reduce on lanes, and the second step is short."""
  V = logits.shape[0]
  if V % row or V <= row: return logits.argmax()
  rows = logits.reshape(V // row, row)
  best = rows.max(1).argmax()  # the first row holding the maximum (max and argmax both see a NaN first)
  first = rows.argmax(1)  # (V // row,) each row's first maximum
  pick = Tensor.arange(V // row, device=logits.device, dtype=dtypes.int32) == best
  return (pick.where(first + Tensor.arange(0, V, row, device=logits.device, dtype=dtypes.int32), 0)).sum() \
    .cast(dtypes.int32)

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

def stack_rows(*ws: Weight, int8: bool = False) -> Weight:
  """Weights stacked along their rows, realized: quantized ones of one type stay quantized (their blocks stacked;
  int8: in the int8 dot product's layout, see QuantizedTensor.realize)."""
  if all(isinstance(w, QuantizedTensor) for w in ws) and len({w.qtype for w in ws}) == 1:  # type: ignore[union-attr]
    q = ws[0]
    assert isinstance(q, QuantizedTensor)
    if any(w.split is not None or w.words is not None for w in ws):  # type: ignore[union-attr]
      raise ValueError(f"stack_rows: stack quantized weights before realize(); got {list(ws)}, some already realized")
    blocks = Tensor.cat(*[w.blocks for w in ws])  # type: ignore[union-attr]
    return QuantizedTensor(blocks, q.qtype, (blocks.shape[0], q.shape[1])).realize(int8)
  return Tensor.cat(*[w.float() for w in ws]).realize()

def in_int8(w: Weight) -> bool:
  """w is quantized in the int8 dot product's layout: its matmuls of any number of rows run as QuantizedTensor.dot."""
  return isinstance(w, QuantizedTensor) and w.words is not None

def settle(w: Weight, int8: bool) -> Weight:
  """A weight realized on its device: a quantized one in the int8 dot product's layout with int8."""
  return w.realize(int8) if isinstance(w, QuantizedTensor) else w.realize()

class EmbeddingRows:
  """Rows of a quantized embedding table as float32: the rows' raw blocks are read on the host (from the file's
  mapping) and dequantized on the device, so the table is never widened. A decode step takes the raw blocks as its
  input and dequantizes them in its own graph (`dequantize`); a prompt's chunk gets float32 bytes from a small jitted
  kernel per row count (`__call__`)."""
  def __init__(self, table: QuantizedTensor, device: str):
    self.table, self.device = table, device
    _, self.n_blocks, self.block_bytes = table.blocks.shape
    self.runs: dict[int, tuple[Tensor, Buffer, TinyJit]] = {}
  def raw(self, tokens: list[int], T: int) -> bytes:
    """The raw blocks of the tokens' rows, then zero blocks up to T rows (which dequantize to zero rows)."""
    raw = b"".join(self.table.row_bytes(t) for t in tokens)
    return raw + bytes(T * self.n_blocks * self.block_bytes - len(raw))
  def dequantize(self, blocks: Tensor) -> Tensor:
    """blocks (T, blocks per row, block bytes) uint8 -> the rows (T, C) float32, in a buffer of their own."""
    return QuantizedTensor(blocks, self.table.qtype, (blocks.shape[0], self.table.shape[1])).dequantize().contiguous()
  def __call__(self, tokens: list[int], T: int) -> bytes:
    if (run := self.runs.get(T)) is None:
      inp = Tensor.empty(T, self.n_blocks, self.block_bytes, dtype=dtypes.uint8, device=self.device)
      run = self.runs[T] = (inp, inp.uop.buffer, TinyJit(lambda b: self.dequantize(b).realize()))
    inp, buf, jit = run
    buf.copyin(memoryview(self.raw(tokens, T)))
    buf.version += 1
    return bytes(jit(inp).data())

class Llama:
  """A llama-family model with a KV cache of `max_context` positions.

  Every forward pass runs a fixed number of rows at a symbolic start position (a bound Variable, a kernel argument,
  not a constant): it writes its keys and values into the cache rows [start, start + T) and attends over the filled
  rows [0, start + T) only, so one compiled program per kernel serves every position, and a step costs what the
  filled part of the context costs. Decoding is T = 1; a prompt runs in chunks of PREFILL_CHUNKS rows (the last
  one padded), so any prompt length reuses the same few programs: a TinyJit per chunk size captures them once and
  replays them, with nothing scheduled or compiled, for every later token and prompt.
  """
  PREFILL_CHUNKS = (64, 8)  # rows per prefill pass, largest first: a prompt is cut into these
  def __init__(self, cfg: LlamaConfig, weights: dict[str, Tensor], max_context: int | None = None,
               progress: Callable[[int, int, str], None] | None = None, int8: bool | None = None):
    self.cfg = cfg
    self.max_context = min(max_context or cfg.context_length, cfg.context_length)
    if self.max_context < 1: raise ValueError(f"Llama: max_context must be at least 1, got {max_context}")
    self.device = Device.DEFAULT
    # int8 activations for the quantized weights' one-row matmuls (QuantizedTensor.dot, llama.cpp's rounding): by
    # default where the device multiplies int8 vectors in one instruction (the float path is faster elsewhere)
    self.int8 = bool(getattr(Device[self.device].renderer, "int8_dot", False)) if int8 is None else int8
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
    # the output projection never takes int8 activations: greedy decoding compares its logits directly, and int8
    # activations moved them by ~1% (SmolLM2's chat answer began with another token: a near tie, 25.33 vs 25.24).
    # A Q8_0 one (SmolLM2's tied embedding) takes 16-bit ones (QuantizedTensor.dot's wide, ~3e-5 of the largest
    # logit) where the device has the int8 dot product: the float path's int8-to-float conversions made it
    # compute-bound, 1.5 ms of a 5 ms decode step for 30 MB of weights
    if isinstance(table, QuantizedTensor):
      self._embedding_rows = EmbeddingRows(table, self.device)
      emb: Any = settle(w("token_embd.weight"), self._wide_head(table)) if "output.weight" not in weights \
        else None  # tied: output
    else:
      emb = w("token_embd.weight").realize()
      self._embedding = bytes(emb.data())
    tick("token_embd.weight")
    self.output_norm = need(w("output_norm.weight"), (C,), "output_norm.weight").realize()
    tick("output_norm.weight")
    self.output = settle(need(w("output.weight"), (V, C), "output.weight"), self._wide_head(weights["output.weight"])) \
      if "output.weight" in weights else emb
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
        wqkv=stack_rows(q, k, v, int8=self.int8), bqkv=bias,
        wo=settle(need(w(p + "attn_output.weight"), (C, H * D), p + "attn_output.weight"), self.int8),
        ffn_norm=need(w(p + "ffn_norm.weight"), (C,), p + "ffn_norm.weight").realize(),
        wgate_up=stack_rows(gate, up, int8=self.int8),
        wdown=settle(need(w(p + "ffn_down.weight"), (C, F), p + "ffn_down.weight"), self.int8)))
      tick(f"blk.{i}")
    # llama 3 files carry per-frequency divisors for long-context rope scaling
    factors = w("rope_freqs.weight").tolist() if "rope_freqs.weight" in weights else None
    R = cfg.rotary_dim // 2
    self._inv_freq = [cfg.rope_theta ** (-2 * i / cfg.rotary_dim) / (factors[i] if factors else 1.0) / cfg.rope_scale
                      for i in range(R)]
    self._rope_cache: dict[int, tuple[bytes, bytes]] = {}
    # the KV cache, (Hkv, rows, D) per layer: rows up to a whole prefill chunk past the context, where the padding
    # rows of a prompt's last chunk land (never read: attention covers the filled positions only)
    big = self.PREFILL_CHUNKS[0]
    self.cache_rows = -(-self.max_context // big) * big
    shape = (cfg.n_kv_heads, self.cache_rows, cfg.head_dim)
    self.cache_k = [Tensor.zeros(*shape, device=self.device).contiguous().realize() for _ in self.layers]
    self.cache_v = [Tensor.zeros(*shape, device=self.device).contiguous().realize() for _ in self.layers]
    # key positions, for the causal mask of a prefill chunk over a symbolic number of filled positions
    self._positions = Tensor.arange(self.cache_rows, device=self.device, dtype=dtypes.int32).realize()
    self.pos = Variable("pos", 0, self.max_context - 1)  # the decode step's position
    self.last = Variable("last", 0, big - 1)  # the row of a prefill chunk whose logits are wanted
    self._decode: Step | None = None
    self._chunks: dict[tuple[int, bool], Step] = {}  # (rows, with logits) -> its jitted step
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

  def _check_tokens(self, tokens: list[int]) -> None:
    V = self.cfg.vocab_size
    for t in tokens:
      if not isinstance(t, int) or not 0 <= t < V:
        raise ValueError(f"Llama: token id {t!r} is outside the vocabulary [0, {V})")
  def _embed(self, tokens: list[int], T: int) -> bytes:
    """The embedding rows of tokens, then zero rows up to T."""
    C = self.cfg.dim
    self._check_tokens(tokens)
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

  def _norm_matmul(self, x: Tensor, norm: Tensor, w: Weight, int8: bool = True) -> Tensor:
    """rms_norm(x) @ w.T (RMSNorm with weight `norm`), the per-row scale applied after the matmul: no extra kernel."""
    return linear(x * norm, w, int8=int8) * self._rms_scale(x)
  def _rms_scale(self, x: Tensor) -> Tensor: return (x.square().mean(-1, keepdim=True) + self.cfg.norm_eps).rsqrt()

  def _block_input(self, layer: Layer, x: Tensor, cos: Tensor, sin: Tensor, int8: bool = True) \
      -> tuple[Tensor, Tensor, Tensor]:
    """q (T, H, D), k and v (T, Hkv, D) of one layer, with rope applied. int8: the matmuls of weights in the int8
    layout quantize their activations (decode steps); else they are the float products (a prompt)."""
    cfg = self.cfg
    T, H, Hkv, D = x.shape[0], cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    if T == 1 or int8 and in_int8(layer.wqkv):  # one matmul for q, k and v, one rope for q and k
      qkv = self._norm_matmul(x, layer.attn_norm, layer.wqkv, int8)
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

  def _block_output(self, layer: Layer, x: Tensor, attn: Tensor, block_bytes: int = 2 << 20, int8: bool = True) \
      -> Tensor:
    x = x + linear(attn, layer.wo, int8=int8)
    T, C, F = x.shape[0], self.cfg.dim, self.cfg.hidden_dim
    if T == 1 or int8 and in_int8(layer.wgate_up):
      gu = self._norm_matmul(x, layer.ffn_norm, layer.wgate_up, int8)
      # the SwiGLU product in a buffer of its own: int8 activations read it twice (the blocks' maxima, the rounding)
      h = gu[:, :F].silu() * gu[:, F:]
      return x + linear(h.contiguous() if in_int8(layer.wdown) and int8 else h, layer.wdown, int8=int8)
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

  def _wide_head(self, w: Weight) -> bool:
    """The output projection w takes 16-bit activations (QuantizedTensor.dot's wide): a Q8_0 one, with int8."""
    return self.int8 and isinstance(w, QuantizedTensor) and w.qtype == "Q8_0"
  def _logits(self, x: Tensor) -> Tensor:
    if in_int8(self.output):
      assert isinstance(self.output, QuantizedTensor)
      return self.output.dot(x * self.output_norm, wide=True) * self._rms_scale(x)
    return self._norm_matmul(x, self.output_norm, self.output)

  def forward(self, x: Tensor, start: UOp, cos: Tensor, sin: Tensor, last: UOp | None) -> list[Tensor]:
    """Rows x (T, C) at positions start, start+1, ... (start a bound Variable): writes their keys and values into
    the cache and returns [the logits (V,) of row `last` (a bound Variable; T = 1 needs none), their argmax], or
    [the last layer's input] when last is None and T > 1 (a prefill chunk before the prompt's last: only its cache
    rows matter). Each layer's cache rows are written by a realize of their own before the attention reads the
    cache, which orders the two (in one schedule the attention reads the buffer, not the write, so nothing would)."""
    cfg = self.cfg
    T, H, Hkv, D = x.shape[0], cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    g, end = H // Hkv, start + T  # end: the filled positions, symbolic
    visible = None
    if T > 1:  # causal: row i (position start + i) sees keys at positions <= start + i
      rows = Tensor.arange(T, device=self.device, dtype=dtypes.int32) + start
      visible = self._positions.shrink(((0, end),)).reshape(end, 1, 1, 1) <= rows.reshape(1, 1, 1, T)
    for i, (layer, ck, cv) in enumerate(zip(self.layers, self.cache_k, self.cache_v)):
      # a prompt's chunk runs the float products, a decode step int8 activations where the weights have their
      # layout: int8 prompts moved SmolLM2's chat answer (the first token's two best logits differ by 0.08)
      q, k, v = self._block_input(layer, x, cos, sin, T == 1)  # (T, H, D), (T, Hkv, D), (T, Hkv, D)
      rows_k, rows_v = (c.shrink((None, (start, end), None)) for c in (ck, cv))
      q = q.contiguous()
      x.realize(q, assign_later(rows_k, k.permute(1, 0, 2)), assign_later(rows_v, v.permute(1, 0, 2)))
      if last is None and T > 1 and i == len(self.layers) - 1: return [x]  # a chunk before the last: cache only
      keys, values = ck.shrink((None, (0, end), None)), cv.shrink((None, (0, end), None))  # (Hkv, end, D)
      if T == 1:
        scores = (q.reshape(Hkv, g, D) @ keys.transpose(1, 2)) * (1 / math.sqrt(D))  # (Hkv, g, end)
        # its own buffer: fused into the output projection, the normalization's per-head division made the matvec's
        # index math divide (and its lanes scalar)
        attn = attend(scores, values).reshape(1, H * D).contiguous()
      else:
        # the symbolic axis outermost, in broadcast products and sums: every stride stays a constant (with it
        # inside, strides are multiples of the symbolic size, and the code generator's index math divided by it
        # for every element: 60 ms for one 64-row chunk's softmax @ v)
        qh = q.reshape(T, Hkv, g, D).permute(1, 2, 0, 3).reshape(1, Hkv, g, T, D)
        keys5, values5 = (c.permute(1, 0, 2).reshape(end, Hkv, 1, 1, D) for c in (keys, values))
        scores = (qh * keys5).sum(-1) * (1 / math.sqrt(D))  # (end, Hkv, g, T)
        assert visible is not None
        scores = visible.where(scores, -math.inf)
        e = (scores - scores.max(0)).exp().contiguous()
        attn = (e.reshape(end, Hkv, g, T, 1) * values5).sum(0) / e.sum(0).reshape(Hkv, g, T, 1)  # (Hkv, g, T, D)
        # rows in (T, C) order: the output projection's matmul then reads them with vector loads
        attn = attn.permute(2, 0, 1, 3).reshape(T, H * D).contiguous()
      x = self._block_output(layer, x, attn, int8=T == 1)
    if T > 1:
      pick = (Tensor.arange(T, device=self.device, dtype=dtypes.int32) == last).reshape(T, 1)
      x = pick.where(x, 0.0).sum(0, keepdim=True)
    logits = self._logits(x).reshape(cfg.vocab_size)
    return [logits, greedy(logits)]

  # ***** token-level driver *****

  def prefill(self, tokens: list[int]) -> Tensor:
    """Run a prompt from position 0 (what the cache held before is dropped); the logits (V,) after its last token.
    The prompt runs in chunks: big ones while more than two small chunks' worth remains (the last one padded),
    then small ones, each size its own jitted pass (compiled once, for every prompt length)."""
    n = len(tokens)
    if n == 0: raise ValueError("Llama.prefill: the prompt has no tokens")
    if n > self.max_context:
      raise ValueError(f"Llama.prefill: the prompt has {n} tokens, more than the context {self.max_context}")
    big, small = self.PREFILL_CHUNKS[0], self.PREFILL_CHUNKS[-1]
    start, outs = 0, None
    while start < n:
      left = n - start
      T = big if left > 2 * small else small
      final = left <= T
      chunk = tokens[start:start + T]
      run = self._chunk_step(T, final)
      cos, sin = self._rope_bytes(start, T)
      vars_ = [run.var.bind(start)] + ([self.last.bind(len(chunk) - 1)] if final else [])
      outs = run(self._embed(chunk, T), vars_, cos, sin)
      start += T
    assert outs is not None
    return self._result(outs)

  def _chunk_step(self, T: int, final: bool) -> Step:
    if (run := self._chunks.get((T, final))) is None:
      R = self.cfg.rotary_dim
      start = Variable(f"start{T}", 0, self.cache_rows - T)
      fn = (lambda x, s, last, c, si: self.forward(x, s, c, si, last)) if final else \
        (lambda x, s, c, si: self.forward(x, s, c, si, None))
      run = self._chunks[(T, final)] = Step(fn, [(T, self.cfg.dim), (T, 1, R), (T, 1, R)], self.device, start)
    return run

  def step(self, token: int, pos: int) -> Tensor:
    """Feed one token at position pos (the cache must hold positions 0..pos-1); the logits (V,) after it."""
    if not 0 <= pos < self.max_context:
      raise ValueError(f"Llama.step: position {pos} is outside the context [0, {self.max_context})")
    rows = self._embedding_rows
    if self._decode is None:
      R = self.cfg.rotary_dim
      if rows is None:
        shapes, dts = [(1, self.cfg.dim), (1, 1, R), (1, 1, R)], [dtypes.float32] * 3
        fn: Callable[..., list[Tensor]] = lambda x, p, c, si: self.forward(x, p, c, si, None)  # noqa: E731
      else:  # the token's raw blocks are the input: no jit of its own and no read-back per step
        shapes = [(1, rows.n_blocks, rows.block_bytes), (1, 1, R), (1, 1, R)]
        dts = [dtypes.uint8, dtypes.float32, dtypes.float32]
        fn = lambda b, p, c, si: self.forward(rows.dequantize(b), p, c, si, None)  # noqa: E731
      self._decode = Step(fn, shapes, self.device, self.pos, dts)
    cos, sin = self._rope_bytes(pos, 1)
    if rows is None: x = self._embed([token], 1)
    else:
      self._check_tokens([token])
      x = rows.raw([token], 1)
    return self._result(self._decode(x, [self.pos.bind(pos)], cos, sin))

  def warm_up(self) -> None:
    """Compile and capture every prefill chunk and the decode step now (a server does this before it listens, so
    no request waits for a compiler)."""
    # each chunk size as a prompt's last chunk and as one before it
    lengths = [min(n, self.max_context) for T in self.PREFILL_CHUNKS for n in (T, T + 1)]
    for n in lengths:
      for _ in range(2): self.prefill([0] * n)  # a TinyJit runs the first call and captures the second
    for _ in range(2): self.step(0, min(1, self.max_context - 1))

  def _result(self, outs: tuple[Tensor, ...]) -> Tensor:
    self._argmax = outs[1].uop.buffer
    return outs[0]

  def greedy_token(self) -> int:
    """The argmax of the logits the last prefill or step returned (computed with them: no extra kernel)."""
    if self._argmax is None: raise RuntimeError("Llama.greedy_token: nothing has run yet")
    return int.from_bytes(self._argmax.as_bytes(), "little", signed=True)

class Step:
  """A jitted step function of inputs of fixed shapes and dtypes (float32 unless `dts` says), fed raw bytes, and
  bound Variables. The inputs are Tensors of their own: each call copies new bytes into their buffers, so the TinyJit
  replays its kernels on the same buffers with the Variables' new values. The function returns the Tensors to
  realize: [result, its argmax] (a call returns them), or a state to realize with nothing returned."""
  def __init__(self, fn: Callable[..., list[Tensor]], shapes: list[tuple[int, ...]], device: str, var: UOp,
               dts: list[DType] | None = None):
    self.fn, self.var = fn, var
    self.inputs = [Tensor.empty(*shape, dtype=dt, device=device)
                   for shape, dt in zip(shapes, dts or [dtypes.float32] * len(shapes))]
    self.bufs: list[Buffer] = [t.uop.buffer for t in self.inputs]
    self.jit = TinyJit(self._run)

  def _run(self, x: Tensor, *rest: Any) -> tuple[Tensor, ...]:
    outs = self.fn(x, *rest)
    outs[0].realize(*outs[1:])
    return tuple(outs)

  def __call__(self, x: bytes, vars_: list[UOp], *rest: bytes) -> tuple[Tensor, ...]:
    for buf, data in zip(self.bufs, (x, *rest)):
      buf.copyin(memoryview(data))
      buf.version += 1  # results computed from the old bytes are stale
    return self.jit(self.inputs[0], *vars_, *self.inputs[1:])

def assign_later(target: Tensor, value: Tensor) -> Tensor:
  """`value` written into target when the result is realized (Tensor.assign writes at once): a whole realized
  buffer, or a shrunk region of one (its bounds may be symbolic: one KV cache row at a Variable position). The value
  may read the target only at the position it writes."""
  u = target.uop
  while u.op in (Ops.RESHAPE, Ops.SHRINK): u = u.src[0]
  if u.op is not Ops.BUFFER:
    raise ValueError(f"assign_later: the target must be a realized buffer or a shrunk region of one, got {u.op}")
  if value.shape != target.shape or value.dtype != target.dtype:
    raise ValueError(f"assign_later: target is {target.shape} {target.dtype}, value {value.shape} {value.dtype}")
  return Tensor(UOp(Ops.ASSIGN, target.dtype, (target.uop, value.uop)), device=target.device)
