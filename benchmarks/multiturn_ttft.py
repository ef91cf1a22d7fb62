"""Time to first token, turn by turn, of one conversation with a long system prompt, through the OpenAI API.

    python benchmarks/multiturn_ttft.py --url http://127.0.0.1:8000 [--api-key KEY] [--turns 4]

Each turn sends the whole conversation so far (about 900 tokens of system prompt, then the turns), streamed with the
`openai` SDK at the default temperature. With a prompt cache, a turn after the first decodes only what is new since
the last; without one, every turn prefills the whole conversation. Run it alone on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import time

from openai import OpenAI

SYSTEM = "You are a support agent for an online shop. " + " ".join(
    f"Policy {n}: orders over {n * 10} dollars ship free within {n + 2} days, and returns are accepted for {n + 20} days."
    for n in range(1, 31)
)
QUESTIONS = [
    "How long do I have to return an order of 45 dollars?",
    "And does it ship free?",
    "Summarize both answers in one sentence.",
    "Thanks! Anything else I should know?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--turns", type=int, default=len(QUESTIONS))
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    client = OpenAI(base_url=f"{args.url}/v1", api_key=args.api_key)
    model = client.models.list().data[0].id
    messages = [{"role": "system", "content": SYSTEM}]
    print(f"load average {os.getloadavg()[0]:.2f}")
    for question in QUESTIONS[: args.turns]:
        messages.append({"role": "user", "content": question})
        started, first, text, usage = time.perf_counter(), None, "", None
        stream = client.chat.completions.create(
            model=model, messages=messages, max_tokens=args.max_tokens, stream=True, stream_options={"include_usage": True}
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                first = first if first is not None else time.perf_counter() - started
                text += chunk.choices[0].delta.content
            usage = chunk.usage or usage
        ttft = f"{first * 1000:6.0f} ms" if first is not None else "  (no text)"
        print(f"prompt {usage.prompt_tokens:5d} tokens  TTFT {ttft}  total {time.perf_counter() - started:5.2f} s")
        messages.append({"role": "assistant", "content": text})
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
