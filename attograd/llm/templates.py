"""Chat prompts: the GGUF file's own Jinja chat template (tokenizer.chat_template) rendered in jinja2's sandbox, so
template text from a file never runs Python; without jinja2, a small renderer per template family (chatml, llama 3,
llama 2, mistral) recognised by the template's markers."""
from __future__ import annotations
import datetime, functools, json
from typing import Any, Callable, Sequence

# ***** messages, as clients send them *****

ROLES = ("system", "developer", "user", "assistant")

def check_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
  """messages as [{"role", "content": str}]: content given as a list of parts ([{"type": "text", "text": ...}], as
  OpenAI clients send it) is joined with newlines, and OpenAI's "developer" role (its newer name for the system
  prompt) becomes "system", which is the role chat templates know."""
  if not isinstance(messages, (list, tuple)) or not messages:
    raise ValueError("chat: messages must be a non-empty list of {role, content} objects")
  out = []
  for i, m in enumerate(messages):
    content = m.get("content") if isinstance(m, dict) else None
    if isinstance(content, list): content = _join_parts(content, i)
    if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(content, str):
      raise ValueError(f"chat: messages[{i}] must be {{\"role\": one of {'|'.join(ROLES)}, \"content\": str or a list "
                       f"of text parts}}, got {str(m)[:80]}")
    out.append({"role": "system" if m["role"] == "developer" else m["role"], "content": content})
  return out

def _join_parts(parts: list[Any], i: int) -> str:
  texts = []
  for j, p in enumerate(parts):
    if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
      kind = p.get("type") if isinstance(p, dict) else type(p).__name__
      raise ValueError(f"chat: messages[{i}].content[{j}] must be {{\"type\": \"text\", \"text\": str}} (only text "
                       f"parts are supported), got type {kind!r}")
    texts.append(p["text"])
  return "\n".join(texts)

# ***** the file's template, in jinja2's sandbox *****

def jinja_available() -> bool:
  try: import jinja2.sandbox  # noqa: F401
  except ImportError: return False
  return True

@functools.lru_cache(maxsize=8)
def _compiled(template: str) -> Any:
  """The template compiled in an immutable sandbox (no attribute that starts with "_", no mutation of lists or dicts,
  no unsafe callables), with Hugging Face's helpers: raise_exception, strftime_now, and a tojson that keeps
  non-ASCII text as it is. Whitespace control as in transformers (trim_blocks, lstrip_blocks)."""
  from jinja2 import TemplateSyntaxError
  from jinja2.ext import loopcontrols
  from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

  class Sandbox(ImmutableSandboxedEnvironment):
    # the stock sandbox answers an unsafe attribute with an Undefined that fails only when used further, so
    # `{{ x.__class__ }}` would print nothing; refusing at once names what the template tried
    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
      raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is refused")

  env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
  env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: \
    json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
  env.globals["raise_exception"] = _raise_exception
  env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(str(fmt))
  try: return env.from_string(template)
  except TemplateSyntaxError as e: raise ValueError(f"chat template: syntax error on line {e.lineno}: {e}") from None

class TemplateRaised(Exception):
  """A template's own raise_exception("...") call (templates use it to refuse, say, roles out of order)."""

def _raise_exception(message: Any) -> None: raise TemplateRaised(str(message))

def render_template(messages: Sequence[dict[str, Any]], template: str, bos: str = "", eos: str = "",
                    add_generation_prompt: bool = True) -> str:
  """The prompt text of `messages` rendered by the Jinja `template`, with transformers' variables: messages,
  add_generation_prompt, bos_token, eos_token (tools and documents None). A template that reaches for Python
  internals, or raises, fails with a ValueError that says so.

  >>> render_template([{"role": "user", "content": "Hi"}], "{{ bos_token }}{% for m in messages %}[{{ m.role }}] "
  ...                 "{{ m.content }}{% endfor %}", bos="<s>")
  '<s>[user] Hi'
  """
  from jinja2 import TemplateError
  from jinja2.sandbox import SecurityError
  msgs = check_messages(messages)
  try:
    return _compiled(template).render(messages=msgs, add_generation_prompt=add_generation_prompt, bos_token=bos,
                                      eos_token=eos, tools=None, documents=None)
  except SecurityError as e: raise ValueError(f"chat template: refused to run: {e}") from None
  except TemplateRaised as e: raise ValueError(f"chat template: {e}") from None
  except (TemplateError, TypeError, ValueError, LookupError, ArithmeticError, RecursionError) as e:
    raise ValueError(f"chat template: rendering failed: {type(e).__name__}: {e}") from None

# ***** without jinja2: a renderer per template family *****

def chat_format(template: str | None) -> str:
  """The family of a chat template: "chatml", "llama3", "llama2", "mistral", or "plain" when there is none."""
  if not template: return "plain"
  if "<|im_start|>" in template: return "chatml"
  if "<|start_header_id|>" in template: return "llama3"
  if "[INST]" in template: return "llama2" if "<<SYS>>" in template else "mistral"
  raise ValueError("chat template: not one of the known families (chatml, llama3, llama2, mistral), and jinja2 "
                   f"isn't installed to render it (pip install jinja2); its start is {template[:80]!r}")

def render_family(messages: Sequence[dict[str, Any]], template: str | None, bos: str = "<s>", eos: str = "</s>") -> str:
  """The prompt for messages, written by the renderer of the template's family (what the template would print,
  for the usual templates of that family, less any default system prompt it inserts), from the assistant's turn.
  No leading BOS (the tokenizer adds it); later ones are text. "plain" joins the contents with newlines.

  >>> render_family([{"role": "user", "content": "Hi"}], "{% ... <|im_start|> ... %}")
  '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
  """
  fmt = chat_format(template)
  msgs = check_messages(messages)
  if fmt == "plain": return "\n".join(m["content"] for m in msgs)
  return FAMILIES[fmt](msgs, bos, eos)

def _chatml(msgs: list[dict[str, str]], bos: str, eos: str) -> str:
  return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs) + "<|im_start|>assistant\n"

def _llama3(msgs: list[dict[str, str]], bos: str, eos: str) -> str:
  head = "<|start_header_id|>{}<|end_header_id|>\n\n"
  return "".join(head.format(m["role"]) + m["content"].strip() + "<|eot_id|>" for m in msgs) + head.format("assistant")

def _inst(msgs: list[dict[str, str]], bos: str, eos: str, sys_block: bool) -> str:
  # the system prompt goes into the first user turn; turns alternate user, assistant
  system = "\n\n".join(m["content"] for m in msgs if m["role"] == "system")
  out, first = "", True
  for m in (m for m in msgs if m["role"] != "system"):
    if m["role"] == "user":
      text = m["content"].strip()
      if first and system: text = f"<<SYS>>\n{system}\n<</SYS>>\n\n{text}" if sys_block else f"{system}\n\n{text}"
      out += ("" if first else bos) + f"[INST] {text} [/INST]"
      first = False
    else: out += f" {m['content'].strip()} {eos}"
  return out

FAMILIES: dict[str, Callable[[list[dict[str, str]], str, str], str]] = {
  "chatml": _chatml, "llama3": _llama3,
  "llama2": lambda m, b, e: _inst(m, b, e, True), "mistral": lambda m, b, e: _inst(m, b, e, False)}

# ***** either way *****

def render_chat(messages: Sequence[dict[str, Any]], template: str | None, bos: str = "<s>", eos: str = "</s>") -> str:
  """The prompt text for messages, ending where the assistant's reply starts: the file's template rendered by
  jinja2's sandbox when jinja2 is installed, the family renderer otherwise (and for files without a template)."""
  if template and jinja_available(): return render_template(messages, template, bos, eos)
  return render_family(messages, template, bos, eos)
