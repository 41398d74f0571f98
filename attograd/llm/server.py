"""An OpenAI-compatible HTTP server on the standard library: POST /v1/completions and /v1/chat/completions (JSON, or
server-sent events with `stream: true`), GET /v1/models, and a chat page at GET /. One model, one request at a time
(a lock serializes generation; other requests wait); bad requests get a 4xx with an OpenAI-style error body."""
from __future__ import annotations
import argparse, json, os, sys, threading, time, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from attograd.llm.generate import LLM
from attograd.llm.sampling import Sampler

MAX_BODY = 4 << 20  # bytes
CHAT_PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat.html")

class APIError(Exception):
  """A request the server refuses: HTTP status, message, OpenAI error type, the offending parameter and a code."""
  def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
               type_: str = "invalid_request_error"):
    super().__init__(message)
    self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_
  def body(self) -> dict[str, Any]:
    return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

# ***** request parameters *****

def _number(req: dict[str, Any], key: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
  v = req.get(key, default)
  if v is None: return default
  if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v > hi or v < lo or (lo_open and v == lo):
    raise APIError(400, f"{key} must be a number in {'(' if lo_open else '['}{lo}, {hi}], got {v!r}", key)
  return float(v)

def _int(req: dict[str, Any], key: str, default: int | None, lo: int) -> int | None:
  v = req.get(key, default)
  if v is None: return default
  if isinstance(v, bool) or not isinstance(v, int) or v < lo:
    raise APIError(400, f"{key} must be an integer >= {lo}, got {v!r}", key)
  return v

def sampler_from(req: dict[str, Any]) -> Sampler:
  """OpenAI's sampling fields (temperature default 1, top_p default 1), plus llama.cpp's top_k and repeat_penalty."""
  for key in ("frequency_penalty", "presence_penalty"):
    if _number(req, key, 0.0, -2.0, 2.0) != 0.0:
      raise APIError(400, f"{key} is not supported (use repeat_penalty)", key)
  if _int(req, "n", 1, 1) != 1: raise APIError(400, "n must be 1: one choice per request", "n")
  for key in ("logprobs", "echo", "suffix", "tools"):
    if req.get(key) not in (None, False): raise APIError(400, f"{key} is not supported", key)
  if req.get("best_of") not in (None, 1): raise APIError(400, "best_of is not supported", "best_of")
  return Sampler(temperature=_number(req, "temperature", 1.0, 0.0, 2.0), top_k=_int(req, "top_k", 0, 0) or 0,
                 top_p=_number(req, "top_p", 1.0, 0.0, 1.0, lo_open=True),
                 repeat_penalty=_number(req, "repeat_penalty", 1.0, 0.0, 100.0, lo_open=True),
                 seed=_int(req, "seed", None, 0))

def _stop(req: dict[str, Any]) -> list[str]:
  stop = req.get("stop")
  if stop is None: return []
  if isinstance(stop, str): stop = [stop]
  if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
    raise APIError(400, "stop must be a non-empty string or a list of at most 4 of them", "stop")
  return stop

# ***** the server *****

class LLMServer(ThreadingHTTPServer):
  daemon_threads = True
  def __init__(self, addr: tuple[str, int], llm: LLM, name: str | None = None, quiet: bool = True):
    super().__init__(addr, Handler)
    self.llm, self.name, self.quiet = llm, name or llm.name, quiet
    self.lock = threading.Lock()  # one generation at a time: the model has one KV cache
    self.created = int(time.time())

  def prompt_ids(self, req: dict[str, Any], chat: bool) -> list[int]:
    llm = self.llm
    if chat:
      try: ids = llm.chat_prompt(req.get("messages"))  # type: ignore[arg-type]
      except ValueError as e: raise APIError(400, str(e), "messages") from None
    else:
      prompt = req.get("prompt")
      if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str): prompt = prompt[0]
      if isinstance(prompt, str): ids = llm.encode(prompt)
      elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if not all(0 <= t < llm.model.cfg.vocab_size for t in prompt):
          raise APIError(400, f"prompt token ids must be in [0, {llm.model.cfg.vocab_size})", "prompt")
        ids = list(prompt)
      else: raise APIError(400, "prompt must be a string, a list of one string, or a list of token ids", "prompt")
      if not ids: raise APIError(400, "the prompt is empty and the model adds no BOS token", "prompt")
    ctx = llm.model.max_context
    if len(ids) > ctx:
      raise APIError(400, f"this model's maximum context length is {ctx} tokens, but the prompt has {len(ids)}",
                     "messages" if chat else "prompt", "context_length_exceeded")
    return ids

class Handler(BaseHTTPRequestHandler):
  protocol_version = "HTTP/1.1"
  server: LLMServer

  def log_message(self, format: str, *args: Any) -> None:
    if not self.server.quiet: super().log_message(format, *args)

  # ***** responses *****

  def _send(self, status: int, body: bytes, ctype: str) -> None:
    self.send_response(status)
    self.send_header("Content-Type", ctype)
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    self.wfile.write(body)

  def _json(self, status: int, obj: Any) -> None: self._send(status, json.dumps(obj).encode(), "application/json")

  def _error(self, e: APIError) -> None:
    if e.status == 413: self.close_connection = True  # the body was not read
    self._json(e.status, e.body())

  # ***** routes *****

  def do_GET(self) -> None:
    path = self.path.split("?", 1)[0]
    if path in ("/", "/index.html"):
      with open(CHAT_PAGE, "rb") as f: self._send(200, f.read(), "text/html; charset=utf-8")
    elif path in ("/v1/models", "/models"):
      self._json(200, {"object": "list", "data": [self._model_card()]})
    elif path.startswith("/v1/models/"):
      name = path[len("/v1/models/"):]
      if name == self.server.name: self._json(200, self._model_card())
      else: self._error(APIError(404, f"the model {name!r} does not exist", "model", "model_not_found"))
    elif path in ("/v1/completions", "/v1/chat/completions"):
      self._error(APIError(405, f"{path} takes POST, not GET"))
    else: self._error(APIError(404, f"no route {path}; try /v1/models, /v1/completions, /v1/chat/completions or /"))

  def do_POST(self) -> None:
    path = self.path.split("?", 1)[0]
    try:
      req = self._read_json()
      if path in ("/v1/completions", "/completions"): self._complete(req, chat=False)
      elif path in ("/v1/chat/completions", "/chat/completions"): self._complete(req, chat=True)
      else: raise APIError(404, f"no route POST {path}; try /v1/completions or /v1/chat/completions")
    except APIError as e: self._error(e)

  def _model_card(self) -> dict[str, Any]:
    return {"id": self.server.name, "object": "model", "created": self.server.created, "owned_by": "attograd"}

  def _read_json(self) -> dict[str, Any]:
    try: n = int(self.headers.get("Content-Length", ""))
    except ValueError: raise APIError(411, "a JSON body with a Content-Length header is required") from None
    if n < 0 or n > MAX_BODY: raise APIError(413, f"the body is {n} bytes; the limit is {MAX_BODY}")
    raw = self.rfile.read(n)
    try: req = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise APIError(400, f"the body is not valid JSON: {e}") from None
    if not isinstance(req, dict): raise APIError(400, f"the body must be a JSON object, got {type(req).__name__}")
    return req

  def _complete(self, req: dict[str, Any], chat: bool) -> None:
    srv = self.server
    model = req.get("model")
    if model is not None and model != srv.name:
      raise APIError(404, f"the model {model!r} does not exist; this server has {srv.name!r}", "model",
                     "model_not_found")
    try: sampler = sampler_from(req)
    except ValueError as e: raise APIError(400, str(e)) from None
    key = "max_completion_tokens" if chat and "max_completion_tokens" in req else "max_tokens"
    max_tokens = _int(req, key, None, 0)
    stop, stream = _stop(req), req.get("stream", False)
    if not isinstance(stream, bool): raise APIError(400, f"stream must be true or false, got {stream!r}", "stream")
    with srv.lock:
      ids = srv.prompt_ids(req, chat)
      room = srv.llm.model.max_context - len(ids)
      limit = room if max_tokens is None else min(max_tokens, room)
      if max_tokens is None and not chat: limit = min(16, room)  # OpenAI's default for completions
      rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
      pieces = srv.llm.stream(ids, sampler, limit, stop)
      if stream: self._stream(rid, chat, pieces)
      else:
        text = "".join(pieces)
        self._json(200, self._envelope(rid, chat, False, text, srv.llm.stats.finish_reason) | {"usage": self._usage()})

  def _usage(self) -> dict[str, int]:
    st = self.server.llm.stats
    return {"prompt_tokens": st.prompt_tokens, "completion_tokens": st.generated,
            "total_tokens": st.prompt_tokens + st.generated}

  def _envelope(self, rid: str, chat: bool, chunk: bool, text: str | None, finish: str | None) -> dict[str, Any]:
    """One response object (or one streamed chunk) in OpenAI's shape."""
    if chat:
      body: dict[str, Any] = {"index": 0, "finish_reason": finish}
      if chunk: body["delta"] = {} if text is None else {"content": text}
      else: body["message"] = {"role": "assistant", "content": text}
      kind = "chat.completion.chunk" if chunk else "chat.completion"
    else:
      body, kind = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}, "text_completion"
    return {"id": rid, "object": kind, "created": int(time.time()), "model": self.server.name, "choices": [body]}

  def _stream(self, rid: str, chat: bool, pieces: Iterator[str]) -> None:
    self.send_response(200)
    self.send_header("Content-Type", "text/event-stream")
    self.send_header("Cache-Control", "no-cache")
    self.send_header("Transfer-Encoding", "chunked")
    self.end_headers()
    def event(obj: Any) -> None:
      data = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
      self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
      self.wfile.flush()
    try:
      if chat:
        first = self._envelope(rid, chat, True, None, None)
        first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
        event(first)
      try:
        for piece in pieces: event(self._envelope(rid, chat, True, piece, None))
        event(self._envelope(rid, chat, True, None, self.server.llm.stats.finish_reason) | {"usage": self._usage()})
      except ValueError as e:  # headers are gone: the error travels as an event
        event(APIError(400, str(e)).body())
      event("[DONE]")
      self.wfile.write(b"0\r\n\r\n")
      self.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):  # the client left: stop generating, free the model
      self.close_connection = True

def serve_main(argv: list[str]) -> int:
  from attograd.llm.__main__ import progress_bar
  p = argparse.ArgumentParser(prog="python -m attograd.llm serve", description=__doc__)
  p.add_argument("--model", required=True, help="a GGUF file")
  p.add_argument("--port", type=int, default=8000)
  p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
  p.add_argument("--max-context", type=int, default=None,
                 help="KV cache positions (default: the model's context length)")
  p.add_argument("--name", default=None, help="the model id clients use (default: the file name without .gguf)")
  p.add_argument("-v", "--verbose", action="store_true", help="log every request")
  args = p.parse_args(argv)
  try: llm = LLM.load(args.model, args.max_context, progress_bar(args.model), args.quantized)
  except (ValueError, OSError) as e:
    sys.stderr.write(f"error: {e}\n")
    return 2
  sys.stderr.write("compiling the decode step...\n")  # so that the first request doesn't wait for it
  llm.generate(llm.encode("Hello") or [0], Sampler(), 2)
  srv = LLMServer((args.host, args.port), llm, args.name, quiet=not args.verbose)
  url = f"http://{args.host}:{srv.server_address[1]}/"
  sys.stderr.write(f"serving {srv.name!r} on {url} (chat page at /, API at /v1)\n")
  try: srv.serve_forever()
  except KeyboardInterrupt: pass
  finally: srv.server_close()
  return 0
