"""Tokenizers built from a GGUF file's metadata: SentencePiece-style (tokenizer.ggml.model "llama": merges by score,
byte fallback) and byte-level BPE ("gpt2", used by llama3 and qwen2: ranked merges after a regex-like pre-split)."""
from __future__ import annotations
import heapq, re, unicodedata
from abc import ABC, abstractmethod
from typing import Any, Callable, Optional, Union

# token_type values in tokenizer.ggml.token_type (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # "▁", SentencePiece's visible space
_UNSET = 0xFFFFFFFF  # llama.cpp writes this (or -1) for a special token id that isn't there
# end-of-generation tokens that aren't tokenizer.ggml.eos_token_id in some models (llama3, qwen2, phi3, gemma, ...)
_EOT_NAMES = ("<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
              "<EOT>")
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_CHAT_MARK = re.compile(r"<\|[^|\s]+\|>")

# ***** greedy pair merging, shared by both kinds *****

def merge_pairs(syms: list[str], key: Callable[[str, str], Optional[float]]) -> list[str]:
  """Merge adjacent symbols until no pair has a key: each step merges the pair with the smallest key, the leftmost
  one on ties (SentencePiece's and BPE's greedy loop, with a heap so long inputs stay O(n log n))."""
  n = len(syms)
  cur: list[Optional[str]] = list(syms)
  prv, nxt = list(range(-1, n - 1)), list(range(1, n + 1))
  heap: list[tuple[float, int, int, int]] = []
  def push(left: int, right: int) -> None:
    a, b = cur[left], cur[right]
    assert a is not None and b is not None
    k = key(a, b)
    if k is not None: heapq.heappush(heap, (k, left, right, len(a) + len(b)))
  for i in range(n - 1): push(i, i + 1)
  while heap:
    _, left, right, size = heapq.heappop(heap)
    a, b = cur[left], cur[right]
    # stale: a side was merged away, or grew (symbols only grow, so equal lengths mean the same symbols)
    if a is None or b is None or nxt[left] != right or len(a) + len(b) != size: continue
    cur[left], cur[right] = a + b, None
    nxt[left] = nxt[right]
    if nxt[left] < n: prv[nxt[left]] = left
    if prv[left] >= 0: push(prv[left], left)
    if nxt[left] < n: push(left, nxt[left])
  return [s for s in cur if s is not None]

# ***** pre-tokenizers: the regexes of llama.cpp's tokenizer.ggml.pre types, as a table *****
# A pre-tokenizer is a list of regexes applied in turn (llama.cpp's unicode_regex_split, Hugging Face's Sequence of
# Split(behavior="isolated")): each one cuts every piece so far into its matches and the text between them. The
# regexes are written as in the models' tokenizer.json files, with \p{..} Unicode classes; Python's `re` lacks those,
# so _compile spells each class out as code point ranges taken from unicodedata (and \s as Unicode White_Space:
# str.isspace, which `re` uses, also counts \x1c..\x1f).

_CONTRACT = r"'s|'t|'re|'ve|'m|'ll|'d"
_GPT2 = _CONTRACT + r"| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
           r"\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"

def _cased(contraction: str, digits: str) -> str:
  """tekken's and gpt-4o's regex: a word may start with an upper-case run (camelCase -> camel, Case)."""
  word = r"[^\r\n\p{L}\p{N}]?"
  return (word + _UPPER + "*" + _LOWER + "+" + contraction + "|" + word + _UPPER + "+" + _LOWER + "*" + contraction +
          r"|\p{N}" + digits + r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

_CJK = r"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"  # deepseek's CJK ranges

# family -> (its regexes, in order; ignore_merges: a piece that is a whole token is taken as it is, unmerged)
PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool]] = {
  "gpt2": ((_GPT2,), False),
  "llama3": ((_LLAMA3,), True),
  "qwen2": ((_QWEN2,), False),
  "smollm": ((r"\p{N}", _GPT2), False),  # each digit alone, then GPT-2's (starcoder, refact, command-r, ...)
  "falcon": ((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"), False),
  "default": ((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"), False),  # llama.cpp's fallback
  "deepseek-coder": ((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"), False),
  "deepseek-v3": ((r"\p{N}{1,3}", r"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                   r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
                   r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"), False),
  "tekken": ((_cased("", ""),), True),
  "gpt-4o": ((_cased(f"(?i:{_CONTRACT})?", "{1,3}"),), False),
  "chameleon": ((r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}",
                 r"[\p{P}!-/:-@\[-`{-~]", _GPT2), False),
  "bloom": ((r" ?[^(\s|.,!?…。，、।۔،)]+",), False),
  "viking": ((r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"), False),
  "seed-coder": ((r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+",), False)}

# tokenizer.ggml.pre (llama.cpp's names, from its llama-vocab.cpp) -> family
PRE_NAMES: dict[str, str] = {
  **dict.fromkeys(("gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4",
                   "a.x-4.0", "mellum", "gigachat"), "gpt2"),
  **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx",
                   "smaug-bpe", "chatglm-bpe", "glm4"), "llama3"),
  **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "grok-2", "kormo"), "qwen2"),
  **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"), "smollm"),
  **dict.fromkeys(("gpt-4o", "llama4", "kanana2"), "gpt-4o"),
  **dict.fromkeys(("poro-chat", "bloom", "gpt3-finnish"), "bloom"),
  "default": "default", "falcon": "falcon", "deepseek-coder": "deepseek-coder", "deepseek-v3": "deepseek-v3",
  "tekken": "tekken", "chameleon": "chameleon", "viking": "viking", "seed-coder": "seed-coder"}

_CLASSES: dict[str, str] = {}  # "L", "Lu", "N", ... and "s" -> the inside of a [...] class for `re`

def _unicode_classes() -> dict[str, str]:
  """Code point ranges of each Unicode general category (one pass over every code point, ~0.1 s, done once)."""
  if _CLASSES: return _CLASSES
  ranges: dict[str, list[tuple[int, int]]] = {}
  cat, start, prev = unicodedata.category, 0, "Cc"
  for c in range(1, 0x110001):
    k = cat(chr(c)) if c < 0x110000 else ""
    if k != prev:
      ranges.setdefault(prev, []).append((start, c - 1))
      start, prev = c, k
  def body(spans: list[tuple[int, int]]) -> str: return "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in sorted(spans))
  for major in "LMNPS":
    _CLASSES[major] = body([r for k, rs in ranges.items() if k.startswith(major) for r in rs])
  for k, rs in ranges.items(): _CLASSES[k] = body(rs)
  # \s is Unicode White_Space: str.isspace() less the four information separators
  spaces = (c for c in map(chr, range(0x3001)) if c.isspace() and c not in "\x1c\x1d\x1e\x1f")
  _CLASSES["s"] = "".join(f"\\U{ord(c):08x}" for c in spaces)
  return _CLASSES

_CLASS_ESCAPE = re.compile(r"\\p\{(\w+)\}|\\([sS])|\\.|\[|\]")

def _compile(pattern: str) -> re.Pattern[str]:
  r"""A tokenizer.json regex as a Python `re` pattern: \p{X} and \s become explicit ranges (inside a [...] class they
  are spliced into it), \S outside a class becomes [^\s]."""
  cls, out, depth, pos = _unicode_classes(), [], 0, 0
  for m in _CLASS_ESCAPE.finditer(pattern):
    out.append(pattern[pos:m.start()])
    pos, tok = m.end(), m.group()
    if tok == "[": depth += 1
    elif tok == "]": depth -= 1
    if m.group(1) is not None or m.group(2) is not None:
      name = m.group(1) or "s"
      if name not in cls: raise ValueError(f"pre-tokenizer: unknown Unicode class \\p{{{name}}} in {pattern!r}")
      assert not (depth and m.group(2) == "S"), "\\S inside a character class"
      if depth: tok = cls[name]
      else: tok = f"[^{cls[name]}]" if m.group(2) == "S" else f"[{cls[name]}]"
    out.append(tok)
  out.append(pattern[pos:])
  return re.compile("".join(out))

_COMPILED: dict[str, list[re.Pattern[str]]] = {}

def pre_split(text: str, kind: str) -> list[str]:
  """Split text the way the named pre-tokenizer family (a key of PRE_TOKENIZERS) does: each regex in turn cuts every
  piece into its matches and the gaps between them."""
  if (pats := _COMPILED.get(kind)) is None: pats = _COMPILED[kind] = [_compile(p) for p in PRE_TOKENIZERS[kind][0]]
  pieces = [text] if text else []
  for pat in pats:
    cut: list[str] = []
    for piece in pieces:
      pos = 0
      for m in pat.finditer(piece):
        if m.start() == m.end(): continue  # an empty match cuts nothing
        if m.start() > pos: cut.append(piece[pos:m.start()])
        cut.append(m.group())
        pos = m.end()
      if pos < len(piece): cut.append(piece[pos:])
    pieces = cut
  return pieces

def bytes_to_unicode() -> dict[int, str]:
  """GPT-2's reversible byte -> printable character map: printable Latin-1 bytes map to themselves, the other 68 to
  U+0100 onwards, in byte order (so a space is "Ġ", U+0120, and a newline "Ċ")."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  out = {b: chr(b) for b in keep}
  for n, b in enumerate(b for b in range(256) if b not in out): out[b] = chr(256 + n)
  return dict(sorted(out.items()))

# ***** tokenizers *****

def _opt_id(kv: dict[str, Any], key: str, n_vocab: int) -> Optional[int]:
  v = kv.get(key)
  if v is None or v == _UNSET or v == -1: return None
  if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n_vocab:
    raise ValueError(f"Tokenizer.from_gguf: {key}={v!r} is not a token id (the vocab has {n_vocab} tokens)")
  return v

class Tokenizer(ABC):
  """Text <-> token ids for a GGUF model. Build one with Tokenizer.from_gguf(kv), kv being gguf_load's metadata.

  >>> tok = Tokenizer.from_gguf(gguf_load("stories260K.gguf")[0])  # doctest: +SKIP
  >>> tok.encode("Once upon a time", bos=True)  # doctest: +SKIP
  [1, 403, 407, 261, 378]
  """
  model = ""  # tokenizer.ggml.model
  add_space_prefix = False  # SentencePiece's dummy prefix: decode drops the space it puts before the first word

  def __init__(self, kv: dict[str, Any]):
    toks = kv.get("tokenizer.ggml.tokens")
    if not isinstance(toks, list) or not toks or not all(isinstance(t, str) for t in toks):
      raise ValueError("Tokenizer.from_gguf: tokenizer.ggml.tokens must be a non-empty list of strings, "
                       f"got {type(toks).__name__}")
    self.tokens: list[str] = toks
    self.vocab_size = len(toks)
    types = kv.get("tokenizer.ggml.token_type")
    if types is not None and len(types) != self.vocab_size:
      raise ValueError(f"Tokenizer.from_gguf: {len(types)} token types for {self.vocab_size} tokens")
    self.types: list[int] = list(types) if types is not None else [NORMAL] * self.vocab_size
    if self.model == "gpt2":  # "<|im_end|>"-like tokens are control tokens even where a converter left them NORMAL
      self.types = [CONTROL if t == NORMAL and _CHAT_MARK.fullmatch(s) else t for s, t in zip(toks, self.types)]
    self.vocab: dict[str, int] = {}
    for i, t in enumerate(toks): self.vocab.setdefault(t, i)
    n = self.vocab_size
    self.bos_id = _opt_id(kv, "tokenizer.ggml.bos_token_id", n)
    self.eos_id = _opt_id(kv, "tokenizer.ggml.eos_token_id", n)
    self.unk_id = _opt_id(kv, "tokenizer.ggml.unknown_token_id", n)
    self.add_bos = bool(kv.get("tokenizer.ggml.add_bos_token", self.model == "llama"))
    self.chat_template: Optional[str] = kv.get("tokenizer.chat_template")
    if types is None:  # without token types, the ids named in the metadata are still the special tokens
      for tid, kind in ((self.bos_id, CONTROL), (self.eos_id, CONTROL), (self.unk_id, UNKNOWN)):
        if tid is not None: self.types[tid] = kind
    self.eot_ids: set[int] = {i for i in (self.eos_id, _opt_id(kv, "tokenizer.ggml.eot_token_id", n),
                                          _opt_id(kv, "tokenizer.ggml.eom_token_id", n)) if i is not None}
    self.eot_ids |= {self.vocab[t] for t in _EOT_NAMES if t in self.vocab}
    # special tokens are matched whole in the text: user-defined ones always, control (and unknown) ones when asked
    self.control = {i for i, t in enumerate(self.types) if t in (CONTROL, UNKNOWN)}
    always = [t for i, t in enumerate(toks) if self.types[i] == USER_DEFINED and t]
    maybe = [t for i, t in enumerate(toks) if i in self.control and t]
    self._special_re = {False: self._alternation(always), True: self._alternation(always + maybe)}

  @staticmethod
  def _alternation(words: list[str]) -> Optional[re.Pattern[str]]:
    # the longest first, so a special token that starts with another one wins
    return re.compile("|".join(map(re.escape, sorted(set(words), key=len, reverse=True)))) if words else None

  @staticmethod
  def from_gguf(kv: dict[str, Any]) -> Tokenizer:
    """The tokenizer a GGUF file describes, from the metadata dict gguf_load returns."""
    model = kv.get("tokenizer.ggml.model")
    if model == "llama": return SPMTokenizer(kv)
    if model == "gpt2": return BPETokenizer(kv)
    raise ValueError(f"Tokenizer.from_gguf: tokenizer.ggml.model={model!r} is not supported; "
                     "supported: 'llama' (SentencePiece) and 'gpt2' (byte-level BPE)")

  def _fragments(self, text: str, allow_special: bool) -> list[Union[str, int]]:
    """text cut at special tokens: plain strings and token ids."""
    pat = self._special_re[allow_special]
    if pat is None: return [text] if text else []
    out: list[Union[str, int]] = []
    pos = 0
    for m in pat.finditer(text):
      if m.start() > pos: out.append(text[pos:m.start()])
      out.append(self.vocab[m.group()])
      pos = m.end()
    if pos < len(text): out.append(text[pos:])
    return out

  @abstractmethod
  def _encode_text(self, text: str, after_special: bool) -> list[int]:
    """Ids of a piece of text without special tokens; after_special: at the start or right after one."""

  def encode(self, text: str, bos: bool = False, allow_special: bool = True) -> list[int]:
    """Token ids of text; BOS first when bos. Special tokens written in the text (like "<|im_end|>") become their
    ids when allow_special; user-defined tokens always do."""
    if not isinstance(text, str): raise TypeError(f"Tokenizer.encode: text must be a str, got {type(text).__name__}")
    ids: list[int] = []
    if bos:
      if self.bos_id is None: raise ValueError("Tokenizer.encode: bos=True, but this vocab has no BOS token")
      ids.append(self.bos_id)
    after_special = True
    for frag in self._fragments(text, allow_special):
      if isinstance(frag, int): ids.append(frag)
      else: ids += self._encode_text(frag, after_special)
      after_special = isinstance(frag, int)
    return ids

  def _check(self, i: int) -> None:
    if not isinstance(i, int) or not 0 <= i < self.vocab_size:
      raise ValueError(f"Tokenizer: token id {i!r} is out of range for a vocab of {self.vocab_size} tokens")

  @abstractmethod
  def token_bytes(self, i: int, special: bool = False) -> bytes:
    """The raw bytes token i adds to the text (control tokens add nothing unless special). A token can be part of
    a UTF-8 character, so a streaming printer should feed these to an incremental UTF-8 decoder. SentencePiece
    vocabs give "▁" as a space: a printer drops the first piece's leading space when add_space_prefix, like decode."""

  def decode(self, ids: list[int], special: bool = False) -> str:
    """The text of ids: BOS is skipped, control tokens too unless special, <0xNN> pieces are bytes, and bad UTF-8
    becomes U+FFFD. With SentencePiece's dummy prefix the first piece loses its leading space (like run.c)."""
    out, first = bytearray(), True
    for i in ids:
      if i == self.bos_id: continue
      b = self.token_bytes(i, special)
      if first and b:
        if self.add_space_prefix and b.startswith(b" "): b = b[1:]
        first = False
      out += b
    return out.decode("utf-8", errors="replace")

  def __repr__(self) -> str:
    return f"<{type(self).__name__} {self.model} vocab_size={self.vocab_size} bos={self.bos_id} eos={self.eos_id}>"

class SPMTokenizer(Tokenizer):
  """SentencePiece-style (llama, llama2, mistral): spaces are "▁", a "▁" goes in front of the text (and after each
  special token), pieces merge pairwise by score, highest first, and characters outside the vocab become <0xNN>
  byte tokens (llama.cpp's llm_tokenizer_spm, llama2.c's encode)."""
  model = "llama"

  def __init__(self, kv: dict[str, Any]):
    super().__init__(kv)
    scores = kv.get("tokenizer.ggml.scores")
    if scores is None or len(scores) != self.vocab_size:
      raise ValueError(f"Tokenizer.from_gguf: a SentencePiece vocab needs tokenizer.ggml.scores, one per token "
                       f"({self.vocab_size}); got {None if scores is None else len(scores)}")
    self.scores: list[float] = [float(s) for s in scores]
    self.add_space_prefix = bool(kv.get("tokenizer.ggml.add_space_prefix", True))
    self.byte_ids: dict[int, int] = {}
    for i, t in enumerate(self.tokens):
      if (m := _BYTE_TOKEN.fullmatch(t)) and (self.types[i] == BYTE or kv.get("tokenizer.ggml.token_type") is None):
        self.byte_ids.setdefault(int(m.group(1), 16), i)
    self._byte_of = {i: b for b, i in self.byte_ids.items()}

  def _pair_key(self, a: str, b: str) -> Optional[float]:
    i = self.vocab.get(a + b)
    return None if i is None else -self.scores[i]

  def _encode_text(self, text: str, after_special: bool) -> list[int]:
    if self.add_space_prefix and after_special: text = " " + text
    ids: list[int] = []
    for piece in merge_pairs(list(text.replace(" ", SPACE)), self._pair_key):
      if (i := self.vocab.get(piece)) is not None: ids.append(i)
      else: ids += [self._byte_id(b, piece) for b in piece.encode("utf-8")]
    return ids

  def _byte_id(self, b: int, piece: str) -> int:
    if b in self.byte_ids: return self.byte_ids[b]
    if self.unk_id is not None: return self.unk_id
    raise ValueError(f"Tokenizer.encode: {piece!r} isn't in the vocab, which has neither <0x{b:02X}> nor an unknown "
                     "token")

  def token_bytes(self, i: int, special: bool = False) -> bytes:
    self._check(i)
    if i in self._byte_of: return bytes([self._byte_of[i]])
    if self.types[i] == CONTROL and not special: return b""
    return self.tokens[i].replace(SPACE, " ").encode("utf-8")

class BPETokenizer(Tokenizer):
  """Byte-level BPE (GPT-2, llama3, qwen2): the text is pre-split by a regex-like scanner, each piece's UTF-8 bytes
  are mapped to printable characters (bytes_to_unicode) and merged pairwise in tokenizer.ggml.merges order."""
  model = "gpt2"

  def __init__(self, kv: dict[str, Any]):
    super().__init__(kv)
    merges = kv.get("tokenizer.ggml.merges")
    if not isinstance(merges, list):
      raise ValueError("Tokenizer.from_gguf: a gpt2 (byte-level BPE) vocab needs tokenizer.ggml.merges")
    self.ranks: dict[tuple[str, str], int] = {}
    for r, m in enumerate(merges):
      parts = m.split(" ") if isinstance(m, str) else []
      if len(parts) != 2 or not all(parts):
        raise ValueError(f"Tokenizer.from_gguf: merge {r} is {m!r}, expected two tokens separated by one space")
      self.ranks.setdefault((parts[0], parts[1]), r)
    pre = kv.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_NAMES:
      raise ValueError(f"Tokenizer.from_gguf: pre-tokenizer tokenizer.ggml.pre={pre!r} is not supported; "
                       f"supported: {sorted(PRE_NAMES)}")
    self.pre = PRE_NAMES[pre]
    self.ignore_merges = PRE_TOKENIZERS[self.pre][1]
    self.byte_char = bytes_to_unicode()
    self.char_byte = {c: b for b, c in self.byte_char.items()}
    self._cache: dict[str, list[int]] = {}

  def _pair_key(self, a: str, b: str) -> Optional[float]: return self.ranks.get((a, b))

  def _word(self, word: str) -> list[int]:
    """Ids of one pre-split piece, already mapped to byte characters."""
    if (hit := self._cache.get(word)) is not None: return hit
    if self.ignore_merges and word in self.vocab: ids = [self.vocab[word]]
    else:
      ids = []
      for piece in merge_pairs(list(word), self._pair_key):
        if piece in self.vocab: ids.append(self.vocab[piece])
        else: ids += [self._char_id(c, word) for c in piece]
    if len(self._cache) > 100_000: self._cache.clear()  # a bound for long-running servers
    self._cache[word] = ids
    return ids

  def _char_id(self, c: str, word: str) -> int:
    if c in self.vocab: return self.vocab[c]
    if self.unk_id is not None: return self.unk_id
    raise ValueError(f"Tokenizer.encode: the vocab has no token for byte {self.char_byte[c]:#04x} (in {word!r}) "
                     "and no unknown token")

  def _encode_text(self, text: str, after_special: bool) -> list[int]:
    ids: list[int] = []
    for piece in pre_split(text, self.pre):
      ids += self._word("".join(self.byte_char[b] for b in piece.encode("utf-8")))
    return ids

  def token_bytes(self, i: int, special: bool = False) -> bytes:
    self._check(i)
    t, kind = self.tokens[i], self.types[i]
    if kind == CONTROL: return t.encode("utf-8") if special else b""
    if kind == USER_DEFINED or not all(c in self.char_byte for c in t): return t.encode("utf-8")
    return bytes(self.char_byte[c] for c in t)
