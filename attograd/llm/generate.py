"""Text in, text out: a model with its tokenizer, streaming generation with stop tokens and incremental UTF-8, and
chat prompts rendered from the model's chat template (llm/templates.py)."""
from __future__ import annotations
import codecs, os, sys, time
from attograd.device import Device, LRUAllocator
from attograd.helpers import prod
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, TextIO
from attograd.llm.model import Llama, LlamaConfig
from attograd.llm.sampling import Sampler
from attograd.llm.templates import chat_format, render_chat  # noqa: F401  (re-exported: the CLI's and tests' names)
from attograd.llm.tokenizer import Tokenizer

# ***** loading *****

def progress_bar(path: str, out: TextIO | None = None, width: int = 30) -> Callable[[int, int, str], None]:
  """A progress callback for Llama loading that redraws one stderr line."""
  stream = out if out is not None else sys.stderr
  start = time.perf_counter()
  def show(done: int, total: int, what: str) -> None:
    filled = width * done // total
    line = f"\rloading {path} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what:<12.12}"
    if done == total: line += f" {time.perf_counter() - start:.1f} s\n"
    stream.write(line)
    stream.flush()
  return show

# ***** generation *****

@dataclass
class Stats:
  prompt_tokens: int = 0
  generated: int = 0
  steps: int = 0  # decode steps run (the first of them compiles the decode kernels, the first time)
  prefill_s: float = 0.0  # the prompt's forward pass
  first_step_s: float = 0.0
  decode_s: float = 0.0  # the decode steps after the first
  finish_reason: str = "length"  # "stop": a stop token or string; "length": max_tokens or the context is full
  @property
  def prefill_tok_s(self) -> float: return self.prompt_tokens / self.prefill_s if self.prefill_s else 0.0
  @property
  def decode_tok_s(self) -> float: return (self.steps - 1) / self.decode_s if self.decode_s else 0.0

@dataclass
class LLM:
  """A model and its tokenizer; `stream` generates text piece by piece."""
  model: Llama
  tokenizer: Tokenizer
  name: str = "model"
  stats: Stats = field(default_factory=Stats)

  @staticmethod
  def load(path: str | os.PathLike, max_context: int | None = None,
           progress: Callable[[int, int, str], None] | None = None, quantized: bool | None = None,
           int8: bool | None = None) -> LLM:
    """The model in a GGUF file. quantized: keep quantized weights quantized in memory (dequantized inside the
    matmul kernels), or widen them to float32 at load. One stream decodes ~2.5x faster quantized (the fused kernels
    read a quarter of the bytes, on vector lanes: SmolLM2 Q4_1 ~120 vs ~45 tok/s), but several rows at once (a
    prefill chunk, a server's batched step) dequantize each weight into a temporary per kernel, which widening
    saves: None (the default; a server's) keeps them quantized only when their float32 copy would take more than a
    quarter of the machine's memory. The CLI keeps them quantized by default. int8: the quantized weights' one-row
    matmuls quantize their activation row to int8 blocks, as llama.cpp does (Llama's option; None: where the device
    has an int8 dot-product instruction)."""
    from attograd.nn.state import gguf_load
    from attograd.nn.gguf import QuantizedTensor
    kv, tensors = gguf_load(path, quantized=True)  # the header; the tensors are views of the file, nothing read yet
    # the tokenizer and the config are checked before any weight is read: an unsupported file fails at once
    tok = Tokenizer.from_gguf(kv)
    cfg = LlamaConfig.from_gguf(kv, tensors)
    if tok.vocab_size != cfg.vocab_size:
      raise ValueError(f"LLM.load: {path}: the tokenizer has {tok.vocab_size} tokens but the model's embedding has "
                       f"{cfg.vocab_size} rows")
    if quantized is None:
      wide = sum(4 * prod(t.shape) for t in tensors.values() if isinstance(t, QuantizedTensor))
      quantized = wide > _memory_bytes() // 4
    if not quantized: tensors = {k: t.dequantize() if isinstance(t, QuantizedTensor) else t for k, t in tensors.items()}
    model = Llama(cfg, tensors, max_context, progress, int8)
    # loading leaves its temporaries (blocks before they were split, copies on the way) in the allocator's cache of
    # freed buffers, where nothing of the model's size will ask for them again: they go back to the system
    if isinstance(alloc := Device[model.device].allocator, LRUAllocator): alloc.free_cache()
    return LLM(model, tok, os.path.splitext(os.path.basename(str(path)))[0])

  def encode(self, text: str) -> list[int]:
    """Prompt ids: BOS first when the tokenizer adds one (special tokens in the text become their ids)."""
    return self.tokenizer.encode(text, bos=self.tokenizer.add_bos and self.tokenizer.bos_id is not None)

  def chat_prompt(self, messages: Sequence[dict[str, Any]]) -> list[int]:
    """The ids of messages rendered by the model's chat template. A template that writes BOS first (llama 2 and 3
    do) gets exactly one BOS token: the tokenizer's, which then sees the text after it as the start (SentencePiece
    puts its space prefix there), even in a file whose tokenizer adds none by itself."""
    t = self.tokenizer
    bos = t.tokens[t.bos_id] if t.bos_id is not None else ""
    eos = t.tokens[t.eos_id] if t.eos_id is not None else ""
    text = render_chat(messages, t.chat_template, bos, eos)
    if bos and text.startswith(bos): return t.encode(text[len(bos):], bos=True)
    return self.encode(text)

  def stream(self, prompt: list[int], sampler: Sampler, max_tokens: int, stop: Sequence[str] = ()) -> Iterator[str]:
    """Generate up to max_tokens after the prompt ids, yielding text as soon as it is complete UTF-8. Stops at an
    end-of-turn token, BOS (llama2.c's rule), a stop string (not yielded), max_tokens or the end of the context;
    self.stats says which and how fast. Like llama2.c, a piece right after BOS loses its leading space."""
    ctx = self.model.max_context
    out = TextStream(self.tokenizer, prompt, max_tokens, ctx, stop)
    self.stats = st = out.stats
    if max_tokens == 0: return
    t0 = time.perf_counter()
    logits = self.model.prefill(prompt)
    st.prefill_s = time.perf_counter() - t0
    while True:
      nxt = sampler(logits, out.tokens) if sampler.needs_logits(out.tokens) else self.model.greedy_token()
      text, done = out.feed(nxt)
      if text: yield text
      if done: break
      t1 = time.perf_counter()
      logits = self.model.step(nxt, len(out.tokens) - 1)
      st.steps += 1
      if st.steps == 1: st.first_step_s = time.perf_counter() - t1
      else: st.decode_s += time.perf_counter() - t1
    if tail := out.tail(): yield tail

  def generate(self, prompt: list[int], sampler: Sampler, max_tokens: int, stop: Sequence[str] = ()) -> str:
    return "".join(self.stream(prompt, sampler, max_tokens, stop))

class TextStream:
  """One generation's token ids -> text: stop tokens (end-of-turn ids and BOS), stop strings (text that could start
  one is held back until it can't), incremental UTF-8, max_tokens and the context's end. Shared by LLM.stream and
  the server's batched engine, so both stop and print alike."""
  def __init__(self, tokenizer: Tokenizer, prompt: list[int], max_tokens: int, ctx: int, stop: Sequence[str] = ()):
    if not prompt: raise ValueError("LLM.stream: the prompt has no tokens")
    if len(prompt) > ctx:
      raise ValueError(f"LLM.stream: the prompt has {len(prompt)} tokens, more than the context ({ctx})")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
      raise ValueError(f"LLM.stream: max_tokens must be >= 0, got {max_tokens!r}")
    self.tok, self.max_tokens, self.ctx, self.stop = tokenizer, max_tokens, ctx, list(stop)
    self.stop_ids = set(tokenizer.eot_ids) | ({tokenizer.bos_id} if tokenizer.bos_id is not None else set())
    self.tokens = list(prompt)
    self.stats = Stats(prompt_tokens=len(prompt))
    self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    self.held = ""  # text that might be the start of a stop string

  def feed(self, nxt: int) -> tuple[str, bool]:
    """The next token: (the text now safe to show, whether generation is over)."""
    st = self.stats
    if nxt in self.stop_ids:
      st.finish_reason = "stop"
      return "", True
    piece = self.tok.token_bytes(nxt)
    if self.tokens[-1] == self.tok.bos_id and piece.startswith(b" "): piece = piece[1:]
    self.tokens.append(nxt)
    st.generated += 1
    text = self.held + self.utf8.decode(piece)
    if (cut := _stop_cut(text, self.stop)) is not None:
      st.finish_reason, self.held = "stop", ""
      return text[:cut], True
    keep = _partial_stop(text, self.stop)
    self.held = text[len(text) - keep:] if keep else ""
    return text[:len(text) - keep], st.generated >= self.max_tokens or len(self.tokens) >= self.ctx

  def tail(self) -> str:
    """What is left to show once generation is over: held-back text, and an incomplete UTF-8 character as U+FFFD."""
    return self.held + self.utf8.decode(b"", final=True)

def _memory_bytes() -> int:
  """Physical memory (POSIX sysconf), or 8 GiB where it can't be read."""
  try: return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError, AttributeError): return 8 << 30

def _stop_cut(text: str, stop: Sequence[str]) -> int | None:
  """Where the earliest stop string starts in text, or None."""
  hits = [i for s in stop if s and (i := text.find(s)) >= 0]
  return min(hits) if hits else None

def _partial_stop(text: str, stop: Sequence[str]) -> int:
  """How many characters at the end of text could be the beginning of a stop string (held back, not yet shown)."""
  best = 0
  for s in stop:
    for k in range(min(len(s) - 1, len(text)), best, -1):
      if text.endswith(s[:k]):
        best = k
        break
  return best
