"""An OpenAI-compatible HTTP server on an ASGI stack (Starlette, served by uvicorn: the `serve` extra): POST
/v1/completions and /v1/chat/completions (JSON, or server-sent events with `stream: true`), GET /v1/models, and a
chat page at GET /. Concurrent requests share decode steps (continuous batching, llm/batch.py); bodies have size,
nesting and read-time limits, generations a time limit, and every error is an OpenAI-style JSON body."""
from __future__ import annotations
import argparse, asyncio, json, os, socket, sys, threading, time, uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator
from attograd.llm.batch import Engine, Request
from attograd.llm.generate import LLM, progress_bar
from attograd.llm.sampling import Sampler

CHAT_PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat.html")

@dataclass(frozen=True)
class Limits:
  max_body: int = 4 << 20  # bytes
  max_depth: int = 64  # JSON nesting
  read_timeout: float = 30.0  # seconds a client may take to send the next piece of its body
  request_timeout: float = 600.0  # seconds a generation may take
  # an over-limit body is still read (and dropped) up to this many bytes before the 413 goes out: most clients
  # (urllib, requests) send the whole body before they read an answer, and a server that closes early leaves them a
  # broken pipe instead of the 413
  max_drain: int = 64 << 20

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
  try:
    return Sampler(temperature=_number(req, "temperature", 1.0, 0.0, 2.0), top_k=_int(req, "top_k", 0, 0) or 0,
                   top_p=_number(req, "top_p", 1.0, 0.0, 1.0, lo_open=True),
                   repeat_penalty=_number(req, "repeat_penalty", 1.0, 0.0, 100.0, lo_open=True),
                   seed=_int(req, "seed", None, 0))
  except ValueError as e: raise APIError(400, str(e)) from None

def _stop(req: dict[str, Any]) -> list[str]:
  stop = req.get("stop")
  if stop is None: return []
  if isinstance(stop, str): stop = [stop]
  if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
    raise APIError(400, "stop must be a non-empty string or a list of at most 4 of them", "stop")
  return stop

def prompt_ids(llm: LLM, req: dict[str, Any], chat: bool) -> list[int]:
  """The request's prompt as token ids (a chat rendered by the model's template), checked against the context."""
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

def json_depth(obj: Any) -> int:
  """How deeply lists and dicts nest in obj (iteratively: the body may be deep)."""
  deepest, stack = 0, [(obj, 1)]
  while stack:
    o, d = stack.pop()
    if isinstance(o, (list, dict)):
      deepest = max(deepest, d)
      stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
  return deepest

# ***** the app *****

def make_app(llm: LLM, engine: Engine, name: str | None = None, limits: Limits = Limits()) -> Any:
  """The Starlette app serving llm through engine (started by the caller)."""
  from starlette.applications import Starlette
  from starlette.exceptions import HTTPException
  from starlette.requests import Request as HTTPRequest
  from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
  from starlette.routing import Route

  model_name, created = name or llm.name, int(time.time())
  def error(e: APIError) -> JSONResponse: return JSONResponse(e.body(), e.status)
  def card() -> dict[str, Any]: return {"id": model_name, "object": "model", "created": created, "owned_by": "attograd"}

  async def page(_: HTTPRequest) -> Response:
    with open(CHAT_PAGE, "rb") as f: return HTMLResponse(f.read())
  async def models(_: HTTPRequest) -> Response: return JSONResponse({"object": "list", "data": [card()]})
  async def model(request: HTTPRequest) -> Response:
    if request.path_params["name"] == model_name: return JSONResponse(card())
    return error(APIError(404, f"the model {request.path_params['name']!r} does not exist", "model", "model_not_found"))

  async def read_json(request: HTTPRequest) -> dict[str, Any]:
    size = request.headers.get("content-length")
    too_big = None
    if size is not None and size.isdigit() and int(size) > limits.max_body:
      too_big = APIError(413, f"the body is {size} bytes; the limit is {limits.max_body}")
    body, seen, chunks = bytearray(), 0, request.stream().__aiter__()
    while True:
      try: chunk = await asyncio.wait_for(chunks.__anext__(), limits.read_timeout)
      except StopAsyncIteration: break
      except asyncio.TimeoutError:
        if too_big is not None: raise too_big from None
        raise APIError(408, f"the body did not arrive within {limits.read_timeout:g} s",
                       type_="timeout_error") from None
      seen += len(chunk)
      if too_big is None and seen > limits.max_body:
        too_big = APIError(413, f"the body is over the limit of {limits.max_body} bytes")
      if too_big is None: body += chunk
      elif seen > limits.max_drain: raise too_big  # past this, closing on the client is cheaper than reading on
    if too_big is not None: raise too_big
    try: req = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise APIError(400, f"the body is not valid JSON: {e}") from None
    except RecursionError: raise APIError(400, f"the body nests deeper than {limits.max_depth} levels") from None
    if json_depth(req) > limits.max_depth: raise APIError(400, f"the body nests deeper than {limits.max_depth} levels")
    if not isinstance(req, dict): raise APIError(400, f"the body must be a JSON object, got {type(req).__name__}")
    return req

  async def complete(request: HTTPRequest) -> Response:
    chat = request.url.path.endswith("chat/completions")
    try:
      req = await read_json(request)
      if (m := req.get("model")) is not None and m != model_name:
        raise APIError(404, f"the model {m!r} does not exist; this server has {model_name!r}", "model",
                       "model_not_found")
      sampler = sampler_from(req)
      key = "max_completion_tokens" if chat and "max_completion_tokens" in req else "max_tokens"
      max_tokens, stop, stream = _int(req, key, None, 0), _stop(req), req.get("stream", False)
      if not isinstance(stream, bool): raise APIError(400, f"stream must be true or false, got {stream!r}", "stream")
      # tokenizing (maybe megabytes) happens here, off the engine's thread: other requests keep decoding
      loop = asyncio.get_running_loop()
      ids = await loop.run_in_executor(None, prompt_ids, llm, req, chat)
    except APIError as e: return error(e)
    room = llm.model.max_context - len(ids)
    limit = room if max_tokens is None else min(max_tokens, room)
    if max_tokens is None and not chat: limit = min(16, room)  # OpenAI's default for completions
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
    pieces: asyncio.Queue[tuple[str, str | None]] = asyncio.Queue()
    def emit(text: str, finish: str | None) -> None: loop.call_soon_threadsafe(pieces.put_nowait, (text, finish))
    job = Request(ids, sampler, limit, stop, emit)
    engine.submit(job)
    deadline = loop.time() + limits.request_timeout
    async def events() -> AsyncIterator[tuple[str, str | None]]:
      try:
        while True:
          try: text, finish = await asyncio.wait_for(pieces.get(), max(0.0, deadline - loop.time()))
          except asyncio.TimeoutError:
            yield "", f"error: the generation took longer than {limits.request_timeout:g} s"
            return
          yield text, finish
          if finish is not None: return
      finally: job.cancel()  # done, failed, timed out, or the client left: the slot is freed
    def usage() -> dict[str, int]:
      st = job.stats
      return {"prompt_tokens": st.prompt_tokens, "completion_tokens": st.generated,
              "total_tokens": st.prompt_tokens + st.generated}
    def envelope(chunk: bool, text: str | None, finish: str | None) -> dict[str, Any]:
      """One response object (or one streamed chunk) in OpenAI's shape."""
      if chat:
        body: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chunk: body["delta"] = {} if text is None else {"content": text}
        else: body["message"] = {"role": "assistant", "content": text}
        kind = "chat.completion.chunk" if chunk else "chat.completion"
      else: body, kind = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}, "text_completion"
      return {"id": rid, "object": kind, "created": int(time.time()), "model": model_name, "choices": [body]}
    if not stream:
      parts, finish = [], None
      async for text, finish in events(): parts.append(text)
      assert finish is not None
      if finish.startswith("error: "):
        status = 504 if "took longer" in finish else 500
        kind = "timeout_error" if status == 504 else "server_error"
        return error(APIError(status, finish[len("error: "):], type_=kind))
      return JSONResponse(envelope(False, "".join(parts), finish) | {"usage": usage()})
    async def sse() -> AsyncIterator[bytes]:
      def event(obj: Any) -> bytes: return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
      if chat:
        first = envelope(True, None, None)
        first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
        yield event(first)
      async for text, finish in events():
        if finish is not None and finish.startswith("error: "):  # the headers are gone: the error is an event
          yield event(APIError(500, finish[len("error: "):], type_="server_error").body())
          break
        if text: yield event(envelope(True, text, None))
        if finish is not None: yield event(envelope(True, None, finish) | {"usage": usage()})
      yield event("[DONE]")
    return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

  async def http_error(request: HTTPRequest, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405: return error(APIError(405, f"{request.url.path} takes POST, not {request.method}"))
    if exc.status_code == 404:
      return error(APIError(404, f"no route {request.method} {request.url.path}; try /v1/models, /v1/completions, "
                                 "/v1/chat/completions or /"))
    return error(APIError(exc.status_code, str(exc.detail)))
  async def server_error(request: HTTPRequest, exc: Exception) -> Response:
    return error(APIError(500, f"{type(exc).__name__}: {exc}", type_="server_error"))

  routes = [Route("/", page), Route("/index.html", page), Route("/v1/models", models), Route("/models", models),
            Route("/v1/models/{name:path}", model)]
  routes += [Route(p, complete, methods=["POST"]) for p in ("/v1/completions", "/completions", "/v1/chat/completions",
                                                            "/chat/completions")]
  return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})

# ***** running it *****

class Server:
  """uvicorn serving an app on a socket bound here (port 0 picks a free one), in a thread; `close()` stops it."""
  def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, quiet: bool = True):
    import uvicorn
    self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    self.sock.bind((host, port))
    self.host, self.port = host, self.sock.getsockname()[1]
    # backlog: bursts of connections wait in the kernel's queue rather than being reset
    cfg = uvicorn.Config(app, log_level="warning" if quiet else "info", access_log=not quiet, backlog=2048,
                         timeout_keep_alive=30, lifespan="off")
    self.server = uvicorn.Server(cfg)
    self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

  def start(self) -> Server:
    self.thread.start()
    while not self.server.started and self.thread.is_alive(): time.sleep(0.01)
    return self

  @property
  def url(self) -> str: return f"http://{self.host}:{self.port}"

  def close(self) -> None:
    self.server.should_exit = True
    self.thread.join(30)
    self.sock.close()

def serve_main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(prog="python -m attograd.llm serve", description=__doc__)
  p.add_argument("--model", required=True, help="a GGUF file")
  p.add_argument("--port", type=int, default=8000)
  p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
  p.add_argument("--max-context", type=int, default=2048,
                 help="KV cache positions per request (default 2048, at most the model's context length)")
  p.add_argument("--slots", type=int, default=8, help="requests decoded together in one step (default 8)")
  p.add_argument("--request-timeout", type=float, default=600.0, help="seconds a generation may take (default 600)")
  p.add_argument("--quantized", action=argparse.BooleanOptionalAction, default=None,
                 help="keep quantized weights quantized in memory (default: only when float32 copies would not fit)")
  p.add_argument("--name", default=None, help="the model id clients use (default: the file name without .gguf)")
  p.add_argument("-v", "--verbose", action="store_true", help="log every request")
  args = p.parse_args(argv)
  try:
    import starlette, uvicorn  # noqa: F401
  except ImportError as e:
    sys.stderr.write(f"error: the server needs {e.name}: pip install 'attograd[serve]' (uvicorn and starlette)\n")
    return 2
  try: llm = LLM.load(args.model, args.max_context, progress_bar(args.model), args.quantized)
  except (ValueError, OSError) as e:
    sys.stderr.write(f"error: {e}\n")
    return 2
  sys.stderr.write(f"compiling the prefill chunks and the {args.slots}-slot decode step...\n")
  engine = Engine(llm, args.slots)
  engine.warm_up()
  engine.start()
  app = make_app(llm, engine, args.name, Limits(request_timeout=args.request_timeout))
  srv = Server(app, args.host, args.port, quiet=not args.verbose)
  sys.stderr.write(f"serving {args.name or llm.name!r} on {srv.url}/ (chat page at /, API at /v1)\n")
  try: srv.server.run(sockets=[srv.sock])
  except KeyboardInterrupt: pass
  finally: engine.close()
  return 0
