"""The VIZ web page: a small HTTP server on 127.0.0.1 serving the recorded run as JSON and the page that draws it
(static/index.html, graphs laid out by the vendored dagre library; nothing is fetched from the network)."""
from __future__ import annotations
import json, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_FILES = {"/": ("index.html", "text/html; charset=utf-8"), "/dagre.min.js": ("dagre.min.js", "text/javascript")}

def make_handler(rec: Any, summary: Callable[[], Any]) -> type[BaseHTTPRequestHandler]:
  """The page's request handler over the recorder `rec`; `summary()` gives the index (/data.json)."""
  class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None: pass  # quiet: the program's own output stays readable
    def _send(self, code: int, body: bytes, ctype: str) -> None:
      self.send_response(code)
      self.send_header("Content-Type", ctype)
      self.send_header("Content-Length", str(len(body)))
      self.send_header("Cache-Control", "no-store")
      self.end_headers()
      self.wfile.write(body)
    def _json(self, obj: Any) -> None: self._send(200, json.dumps(obj).encode(), "application/json")
    def do_GET(self) -> None:
      path = self.path.split("?", 1)[0]
      if path in _FILES:
        fn, ctype = _FILES[path]
        with open(os.path.join(STATIC, fn), "rb") as f: return self._send(200, f.read(), ctype)
      if path == "/data.json": return self._json(summary())
      kind, _, idx = path.strip("/").partition("/")
      items = {"kernel": rec.kernels, "schedule": rec.schedules}.get(kind)
      if items is not None and idx.removesuffix(".json").isdigit() and int(idx.removesuffix(".json")) < len(items):
        return self._json(items[int(idx.removesuffix(".json"))])
      if path == "/loose.json": return self._json(rec.loose)
      self._send(404, b"not found", "text/plain")
  return Handler

def serve(rec: Any, port: int, summary: Callable[[], Any]) -> None:
  """Serve until interrupted (Ctrl-C). Loopback only: the page shows the program's code and data."""
  server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(rec, summary))
  print(f"VIZ: {len(rec.schedules)} schedules, {len(rec.kernels)} kernels at http://127.0.0.1:{server.server_port}/ "
        "(Ctrl-C to stop)", flush=True)
  try: server.serve_forever()
  except KeyboardInterrupt: pass
  finally: server.server_close()
