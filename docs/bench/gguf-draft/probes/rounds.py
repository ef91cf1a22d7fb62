"""Per-round breakdown through a running verify service: on vs off, same prompts."""
import json, statistics, sys, time
from specdec.client import VerifyClient
prompts = [json.loads(l) for l in open("benchmarks/chat-prompts.jsonl")][: int(sys.argv[2]) if len(sys.argv) > 2 else 4]
def msgs(p):
    return p.get("messages") or [{"role": "user", "content": p.get("prompt") or p["turns"][0]}]
with VerifyClient(sys.argv[1]) as client:
    client.generate(msgs(prompts[0]), max_tokens=8, temperature=0)
    for mode in ("on", "off", "on", "off"):
        walls, rounds, toks = [], [], 0
        for p in prompts:
            t = time.perf_counter()
            c = client.generate(msgs(p), max_tokens=64, temperature=0, speculative=(mode == "on"), speculation_policy="always")
            walls.append(time.perf_counter() - t); toks += len(c.token_ids); rounds += list(c.rounds)
        later = rounds  # all rounds
        med = lambda f: statistics.median(f(r) for r in later) if later else 0
        print(mode, f"wall {sum(walls):.2f}s tokens {toks} ms/token {1000*sum(walls)/toks:.1f} rounds {len(rounds)}",
              f"median target_ms {med(lambda r: r.target_ms):.1f} draft_ms {med(lambda r: r.draft_ms):.1f} transport_ms {med(lambda r: r.transport_ms):.1f}",
              f"sum target {sum(r.target_ms for r in rounds)/1000:.2f}s draft {sum(r.draft_ms for r in rounds)/1000:.2f}s transport {sum(r.transport_ms for r in rounds)/1000:.2f}s", flush=True)
