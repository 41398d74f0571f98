"""Command line: `python -m attograd.llm --model FILE --prompt TEXT` streams a completion to stdout (speeds on stderr);
`python -m attograd.llm serve --model FILE --port N` runs the OpenAI-compatible HTTP server with a chat page."""
from __future__ import annotations
import argparse, random, sys
from attograd.llm.generate import LLM, progress_bar
from attograd.llm.sampling import Sampler

def _context_arg(p: argparse.ArgumentParser) -> None:
  p.add_argument("--max-context", type=int, default=None,
                 help="KV cache positions (default: the model's context length)")
  p.add_argument("--quantized", action=argparse.BooleanOptionalAction, default=True,
                 help="keep quantized weights quantized in memory, dequantized inside the matmuls (the default: "
                      "decoding reads a quarter of the bytes); --no-quantized widens them to float32 at load")

def _load(args: argparse.Namespace) -> LLM:
  return LLM.load(args.model, args.max_context, progress_bar(args.model), args.quantized)

def _report(llm: LLM) -> None:
  st = llm.stats
  steps = f"{st.steps - 1} steps in {st.decode_s:.2f} s ({st.decode_tok_s:.1f} tok/s, the first step excluded)" \
    if st.steps > 1 else "fewer than 2 steps, no rate"
  sys.stderr.write(f"\nprefill: {st.prompt_tokens} tokens in {st.prefill_s:.3f} s ({st.prefill_tok_s:.1f} tok/s); "
                   f"decode: {st.generated} tokens, {steps}; finish: {st.finish_reason}\n")

def _stream(llm: LLM, ids: list[int], sampler: Sampler, max_tokens: int) -> str:
  out = []
  for piece in llm.stream(ids, sampler, max_tokens):
    sys.stdout.buffer.write(piece.encode("utf-8"))
    sys.stdout.flush()
    out.append(piece)
  return "".join(out)

def generate_main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(prog="python -m attograd.llm", description="Generate text with a GGUF llama model.",
                              epilog="Serve it over HTTP with: python -m attograd.llm serve --model FILE --port N")
  p.add_argument("--model", required=True, help="a GGUF file (llama, mistral or qwen2; F32, F16, Q8_0, Q4_0, ...)")
  p.add_argument("--prompt", help="the prompt; with --chat and no prompt, an interactive chat reads lines from stdin")
  p.add_argument("--max-tokens", type=int, default=256, help="tokens to generate at most (default 256)")
  p.add_argument("--temperature", type=float, default=0.8, help="0 is greedy (default 0.8)")
  p.add_argument("--top-k", type=int, default=40, help="keep the k most likely tokens, 0 keeps all (default 40)")
  p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass (default 0.95; 1 turns it off)")
  p.add_argument("--repeat-penalty", type=float, default=1.0, help="penalty for the last 64 tokens (default 1, off)")
  p.add_argument("--seed", type=int, default=None, help="sampling seed (default: random, printed on stderr)")
  p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
  p.add_argument("--system", default=None, help="a system message for --chat")
  _context_arg(p)
  args = p.parse_args(argv)
  if args.prompt is None and not args.chat: p.error("--prompt is required (or --chat for an interactive chat)")
  seed = args.seed if args.seed is not None else random.randrange(1 << 31)
  try:
    sampler = Sampler(args.temperature, args.top_k, args.top_p, args.repeat_penalty, seed=seed)
    llm = _load(args)
  except (ValueError, OSError) as e:
    sys.stderr.write(f"error: {e}\n")
    return 2
  if args.seed is None and not sampler.greedy: sys.stderr.write(f"seed {seed}\n")
  try:
    if not args.chat:
      sys.stdout.buffer.write(args.prompt.encode("utf-8"))  # the completion continues the prompt: show both
      _stream(llm, llm.encode(args.prompt), sampler, args.max_tokens)
      _report(llm)
      return 0
    if not llm.tokenizer.chat_template:
      sys.stderr.write("note: the model has no chat template; messages are joined as plain text\n")
    messages = [{"role": "system", "content": args.system}] if args.system else []
    prompts = [args.prompt] if args.prompt is not None else None
    while True:
      if prompts is not None:
        if not prompts: return 0
        text = prompts.pop()
      else:
        sys.stderr.write("> ")
        sys.stderr.flush()
        if not (line := sys.stdin.readline()): return 0
        text = line.rstrip("\n")
      messages.append({"role": "user", "content": text})
      reply = _stream(llm, llm.chat_prompt(messages), sampler, args.max_tokens)
      messages.append({"role": "assistant", "content": reply})
      _report(llm)
  except ValueError as e:
    sys.stderr.write(f"\nerror: {e}\n")
    return 2

def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if argv[:1] == ["serve"]:
    from attograd.llm.server import serve_main
    return serve_main(argv[1:])
  return generate_main(argv)

if __name__ == "__main__":
  raise SystemExit(main())
