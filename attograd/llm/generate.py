"""Text in, text out: a model with its tokenizer, streaming generation with stop tokens and incremental UTF-8, and
chat prompts rendered from the model's chat template (llm/templates.py)."""
from __future__ import annotations
import codecs, os, time
from attograd.helpers import prod
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence
from attograd.llm.model import Llama, LlamaConfig
from attograd.llm.sampling import Sampler
from attograd.llm.templates import chat_format, render_chat  # noqa: F401  (re-exported: the CLI's and tests' names)
from attograd.llm.tokenizer import Tokenizer

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
           progress: Callable[[int, int, str], None] | None = None, quantized: bool | None = None) -> LLM:
    """The model in a GGUF file. quantized: keep quantized weights quantized in memory (dequantized inside the
    matmul kernels), or widen them to float32 at load. The fused kernels are scalar for now (the code generator
    vectorizes float lanes only), so widening decodes ~5x faster while it fits: None (the default) keeps them
    quantized only when their float32 copy would take more than a quarter of the machine's memory."""
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
    return LLM(Llama(cfg, tensors, max_context, progress), tok, os.path.splitext(os.path.basename(str(path)))[0])

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
    if not prompt: raise ValueError("LLM.stream: the prompt has no tokens")
    ctx = self.model.max_context
    if len(prompt) > ctx:
      raise ValueError(f"LLM.stream: the prompt has {len(prompt)} tokens, more than the context ({ctx})")
    if not isinstance(max_tokens, int) or max_tokens < 0:
      raise ValueError(f"LLM.stream: max_tokens must be >= 0, got {max_tokens!r}")
    t = self.tokenizer
    stop_ids = set(t.eot_ids) | ({t.bos_id} if t.bos_id is not None else set())
    self.stats = st = Stats(prompt_tokens=len(prompt))
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    held = ""  # text that might be the start of a stop string
    tokens = list(prompt)
    if max_tokens == 0: return
    t0 = time.perf_counter()
    logits = self.model.prefill(tokens)
    st.prefill_s = time.perf_counter() - t0
    while True:
      nxt = sampler(logits, tokens) if sampler.needs_logits(tokens) else self.model.greedy_token()
      if nxt in stop_ids:
        st.finish_reason = "stop"
        break
      piece = t.token_bytes(nxt)
      if tokens[-1] == t.bos_id and piece.startswith(b" "): piece = piece[1:]
      tokens.append(nxt)
      st.generated += 1
      text = held + utf8.decode(piece)
      cut = _stop_cut(text, stop)
      if cut is not None:
        if text[:cut]: yield text[:cut]
        st.finish_reason, held = "stop", ""
        break
      keep = _partial_stop(text, stop)
      held = text[len(text) - keep:] if keep else ""
      if text[:len(text) - keep]: yield text[:len(text) - keep]
      if st.generated >= max_tokens or len(tokens) >= ctx: break
      t1 = time.perf_counter()
      logits = self.model.step(nxt, len(tokens) - 1)
      st.steps += 1
      if st.steps == 1: st.first_step_s = time.perf_counter() - t1
      else: st.decode_s += time.perf_counter() - t1
    tail = held + utf8.decode(b"", final=True)
    if tail: yield tail

  def generate(self, prompt: list[int], sampler: Sampler, max_tokens: int, stop: Sequence[str] = ()) -> str:
    return "".join(self.stream(prompt, sampler, max_tokens, stop))

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
