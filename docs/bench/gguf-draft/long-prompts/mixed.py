"""A long Spec-Bench prompt and short chat requests at once, through verify's Generate on 18082."""
import sys, time, threading, json

from pathlib import Path
from specdec.cli.bench import load_prompts
from specdec.cli.client import VerifyClient
long_prompts = load_prompts(Path("benchmarks/spec-bench/question.jsonl"), ["summarization"], 2)
chats = [json.loads(l) for l in open("benchmarks/chat-prompts.jsonl")][:6]
def run_long():
    with VerifyClient("localhost:18082") as c:
        for p in long_prompts:
            t = time.perf_counter(); comp = c.generate(p.messages, max_tokens=64, temperature=0)
            print(f"long: {time.perf_counter()-t:.2f} s, drafted {sum(r.num_candidates for r in comp.rounds)}", flush=True)
th = threading.Thread(target=run_long); th.start(); time.sleep(0.5)
with VerifyClient("localhost:18082") as c:
    for row in chats:
        msgs = row.get("messages") or [{"role": "user", "content": row.get("prompt")}]
        t = time.perf_counter(); comp = c.generate(msgs, max_tokens=64, temperature=0)
        fb = any(r.fallback for r in comp.rounds)
        print(f"chat: {time.perf_counter()-t:.2f} s, {len(comp.token_ids)} tok, drafted {sum(r.num_candidates for r in comp.rounds)} accepted {sum(r.num_accepted for r in comp.rounds)} fallback {fb}", flush=True)
th.join()
