"""MkDocs hook: every ```python run``` block of a page is executed when the site is built (one namespace per page,
blocks in order) and shown followed by what it printed, so examples and the deep dive's stage outputs can't go stale.
A block that raises fails the build."""
from __future__ import annotations
import contextlib, io, re, textwrap
from typing import Any

_BLOCK = re.compile(r"^```python run\n(.*?)^```\n", re.S | re.M)

def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
  if "```python run" not in markdown: return markdown
  namespace: dict[str, Any] = {"__name__": f"docs.{page.file.src_uri}"}
  def run(m: re.Match[str]) -> str:
    code = m.group(1)
    out = io.StringIO()
    try:
      with contextlib.redirect_stdout(out): exec(compile(code, page.file.src_uri, "exec"), namespace)
    except Exception as e:
      raise RuntimeError(f"{page.file.src_uri}: a `python run` block failed: {type(e).__name__}: {e}\n"
                         f"{textwrap.indent(code, '    ')}") from e
    shown = f"```python\n{code}```\n"
    printed = out.getvalue()
    return shown + (f"\n```text\n{printed.rstrip()}\n```\n" if printed.strip() else "")
  return _BLOCK.sub(run, markdown)

# ***** docstring examples: `>>>` lines and their output shown as Python code, not Markdown text *****

import markdown  # noqa: E402
from markdown.preprocessors import Preprocessor  # noqa: E402
from mkdocs.plugins import event_priority  # noqa: E402

class _DoctestBlocks(Preprocessor):
  """Wrap each run of `>>>` lines (with the output lines after them, up to a blank line) in a fenced code block."""
  def run(self, lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
      if not lines[i].lstrip().startswith(">>>"):
        out.append(lines[i])
        i += 1
        continue
      block = []
      while i < len(lines) and lines[i].strip():
        block.append(lines[i].strip())
        i += 1
      out += ["", "```pycon", *block, "```", ""]
    return out

class DoctestExtension(markdown.Extension):
  def extendMarkdown(self, md: markdown.Markdown) -> None:
    md.preprocessors.register(_DoctestBlocks(md), "doctest_blocks", 40)

@event_priority(100)  # before mkdocstrings reads the extensions for its own Markdown instance
def on_config(config: Any) -> Any:
  config.markdown_extensions.append(DoctestExtension())
  return config
