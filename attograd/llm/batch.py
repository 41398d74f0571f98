"""Continuous batching: several generations share each decode step (one read of the weights serves every slot's
token), and an engine thread admits new requests into free slots between steps. The server's generation path."""
from __future__ import annotations
import math, queue, threading, time
from array import array
from dataclasses import dataclass, field
from typing import Callable
from attograd.dtype import dtypes
from attograd.tensor.jit import TinyJit
from attograd.llm.generate import LLM, Stats, TextStream
from attograd.llm.model import Llama, Step, assign_later
from attograd.llm.sampling import Sampler
from attograd.tensor import Tensor
from attograd.uop.ops import UOp, Variable

class BatchedDecoder:
  """`slots` KV caches beside a Llama's own, and a decode step over all of them at once: x (B, C) at per-slot
  positions. Attention covers [0, end) with end the furthest slot's filled length (a Variable, so one program per
  kernel serves every step), each slot masked to its own positions. A prompt is prefilled by the model's chunked
  prefill into its own cache, then copied into a slot."""
  def __init__(self, model: Llama, slots: int):
    if slots < 1: raise ValueError(f"BatchedDecoder: slots must be at least 1, got {slots}")
    self.model, self.B = model, slots
    cfg = model.cfg
    shape = (slots, cfg.n_kv_heads, model.cache_rows, cfg.head_dim)
    self.cache_k = [Tensor.zeros(*shape, device=model.device).contiguous().realize() for _ in model.layers]
    self.cache_v = [Tensor.zeros(*shape, device=model.device).contiguous().realize() for _ in model.layers]
    self.end = Variable("end", 1, model.max_context)  # the furthest slot's filled positions, its token included
    self.slot = Variable("slot", 0, slots - 1)
    self.filled = Variable("filled", 1, model.max_context)
    R = cfg.rotary_dim
    # inputs: the rows' embeddings, cos, sin, and their positions (as float32: exact below 2**24)
    self._step = Step(self._decode_rows, [(slots, cfg.dim), (slots, 1, R), (slots, 1, R), (slots,)], model.device,
                      self.end)
    self._copy = TinyJit(self._copy_rows)

  def _decode_rows(self, x: Tensor, end: UOp, cos: Tensor, sin: Tensor, positions: Tensor) -> list[Tensor]:
    m, cfg = self.model, self.model.cfg
    B, H, Hkv, D = self.B, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    g = H // Hkv
    pos = positions.cast(dtypes.int32).reshape(1, B)
    cols = m._positions.shrink(((0, end),)).reshape(end, 1)
    here, visible = (cols == pos).permute(1, 0).reshape(B, 1, end, 1), (cols <= pos).reshape(end, B, 1, 1)
    for layer, ck, cv in zip(m.layers, self.cache_k, self.cache_v):
      q, k, v = m._block_input(layer, x, cos, sin)  # (B, H, D), (B, Hkv, D), (B, Hkv, D)
      # each slot's row at its own position, written by rewriting the filled region [0, end) of every slot
      region_k, region_v = (c.shrink((None, None, (0, end), None)) for c in (ck, cv))  # (B, Hkv, end, D)
      new_k = here.where(k.reshape(B, Hkv, 1, D), region_k)
      new_v = here.where(v.reshape(B, Hkv, 1, D), region_v)
      q = q.contiguous()
      x.realize(q, assign_later(region_k, new_k), assign_later(region_v, new_v))
      # the symbolic axis outermost (constant strides), as in Llama.forward's prefill attention
      keys, values = (c.shrink((None, None, (0, end), None)).permute(2, 0, 1, 3).reshape(end, B, Hkv, 1, D)
                      for c in (ck, cv))
      scores = (q.reshape(1, B, Hkv, g, D) * keys).sum(-1) * (1 / math.sqrt(D))  # (end, B, Hkv, g)
      scores = visible.where(scores, -math.inf)
      e = (scores - scores.max(0)).exp().contiguous()
      attn = (e.reshape(end, B, Hkv, g, 1) * values).sum(0) / e.sum(0).reshape(B, Hkv, g, 1)  # (B, Hkv, g, D)
      x = m._block_output(layer, x, attn.reshape(B, H * D).contiguous())
    logits = m._logits(x)  # (B, V)
    return [logits, logits.argmax(-1)]

  def _copy_rows(self, slot: UOp, filled: UOp) -> Tensor:
    """The model's cache rows [0, filled) into slot `slot`."""
    cfg = self.model.cfg
    writes = []
    for src, dst in zip(self.model.cache_k + self.model.cache_v, self.cache_k + self.cache_v):
      rows = src.shrink((None, (0, filled), None)).reshape(1, cfg.n_kv_heads, filled, cfg.head_dim)
      writes.append(assign_later(dst.shrink(((slot, slot + 1), None, (0, filled), None)), rows))
    writes[0].realize(*writes[1:])
    return writes[0]

  def prefill(self, slot: int, tokens: list[int]) -> Tensor:
    """The prompt into slot `slot` from position 0; the logits (V,) after its last token (its argmax:
    model.greedy_token())."""
    logits = self.model.prefill(tokens)
    self._copy(self.slot.bind(slot), self.filled.bind(len(tokens)))
    return logits

  def step(self, tokens: list[int], positions: list[int]) -> tuple[Tensor, list[int]]:
    """One token per slot (token, position) -> (logits (B, V), the greedy token of each slot). Idle slots pass any
    token at position 0 of their own cache, which their next prompt overwrites."""
    m = self.model
    end = max(positions) + 1
    cos, sin = zip(*(m._angles(p) for p in positions))
    outs = self._step(m._embed(tokens, self.B), [self.end.bind(end)], b"".join(cos), b"".join(sin),
                      array("f", positions).tobytes())
    greedy = array("i", buffers_bytes(outs[1]))
    return outs[0], list(greedy)

def buffers_bytes(t: Tensor) -> bytes:
  return t.uop.buffer.as_bytes()

# ***** the engine: one thread owns the model; requests come and go between steps *****

@dataclass
class Request:
  """One generation. `emit(text, finish)` is called from the engine thread: text pieces with finish None, then once
  with the finish reason ("stop", "length", or "error: ..."); `cancel()` (a client that left) frees its slot."""
  prompt: list[int]
  sampler: Sampler
  max_tokens: int
  stop: list[str]
  emit: Callable[[str, str | None], None]
  stats: Stats = field(default_factory=Stats)
  cancelled: bool = False
  def cancel(self) -> None: self.cancelled = True

class Engine:
  """Runs requests in `slots` slots of a BatchedDecoder: each loop admits waiting requests into free slots (one
  prefill each), then runs one decode step for every busy slot."""
  def __init__(self, llm: LLM, slots: int = 8):
    self.llm = llm
    self.decoder = BatchedDecoder(llm.model, slots)
    self.waiting: queue.Queue[Request] = queue.Queue()
    self.busy: dict[int, tuple[Request, TextStream]] = {}
    self._stop = threading.Event()
    self.thread = threading.Thread(target=self._loop, name="attograd-llm-engine", daemon=True)

  def start(self) -> Engine:
    self.thread.start()
    return self

  def close(self) -> None:
    self._stop.set()
    self.waiting.put(None)  # type: ignore[arg-type]  # wakes the loop
    self.thread.join(30)

  def submit(self, req: Request) -> None: self.waiting.put(req)

  def warm_up(self) -> None:
    """Compile and capture the prefill chunks, the slot copy and the batched step before serving."""
    self.llm.model.warm_up()
    for _ in range(2): self.decoder.prefill(0, [0])
    for _ in range(2): self.decoder.step([0] * self.decoder.B, [0] * self.decoder.B)

  def _loop(self) -> None:
    while not self._stop.is_set():
      try:
        while len(self.busy) < self.decoder.B:
          req = self.waiting.get(block=not self.busy)
          if req is None: break
          self._admit(req)
      except queue.Empty: pass
      try:
        if self.busy: self._step()
      except Exception as e:  # a bug here must fail the requests it touched, not stop the engine for everyone
        for req, _ in self.busy.values(): req.emit("", f"error: {type(e).__name__}: {e}")
        self.busy.clear()

  def _admit(self, req: Request) -> None:
    slot = next(i for i in range(self.decoder.B) if i not in self.busy)
    try:
      out = TextStream(self.llm.tokenizer, req.prompt, req.max_tokens, self.llm.model.max_context, req.stop)
      req.stats = out.stats
      if req.max_tokens == 0 or req.cancelled: return req.emit("", out.stats.finish_reason)
      t0 = time.perf_counter()
      logits = self.decoder.prefill(slot, req.prompt)
      out.stats.prefill_s = time.perf_counter() - t0
      nxt = req.sampler(logits, out.tokens) if req.sampler.needs_logits(out.tokens) else self.llm.model.greedy_token()
    except Exception as e:  # a bad request must not stop the engine
      return req.emit("", f"error: {e}")
    self.busy[slot] = (req, out)
    self._feed(slot, nxt)

  def _feed(self, slot: int, nxt: int) -> None:
    req, out = self.busy[slot]
    text, done = out.feed(nxt)
    if text: req.emit(text, None)
    if done or req.cancelled:
      del self.busy[slot]
      req.emit(out.tail(), out.stats.finish_reason)

  def _step(self) -> None:
    B = self.decoder.B
    tokens, positions = [0] * B, [0] * B
    for slot, (_, out) in self.busy.items(): tokens[slot], positions[slot] = out.tokens[-1], len(out.tokens) - 1
    t0 = time.perf_counter()
    try: logits, greedy = self.decoder.step(tokens, positions)
    except Exception as e:
      for slot, (req, _) in list(self.busy.items()): req.emit("", f"error: {e}")
      self.busy.clear()
      return
    dt = time.perf_counter() - t0
    for slot, (req, out) in list(self.busy.items()):
      out.stats.steps += 1
      out.stats.decode_s += dt
      nxt = req.sampler(logits[slot], out.tokens) if req.sampler.needs_logits(out.tokens) else greedy[slot]
      self._feed(slot, nxt)

def generate_batched(engine: Engine, prompts: list[list[int]], sampler: Sampler, max_tokens: int) -> list[str]:
  """Run prompts together through the engine and wait for all of them (a helper for tests and benchmarks)."""
  done = threading.Semaphore(0)
  texts: list[list[str]] = [[] for _ in prompts]
  def emitter(i: int) -> Callable[[str, str | None], None]:
    def emit(text: str, finish: str | None) -> None:
      texts[i].append(text)
      if finish is not None:
        if finish.startswith("error"): texts[i].append(f"<{finish}>")
        done.release()
    return emit
  for i, p in enumerate(prompts): engine.submit(Request(p, sampler, max_tokens, [], emitter(i)))
  for _ in prompts: done.acquire()
  return ["".join(t) for t in texts]
