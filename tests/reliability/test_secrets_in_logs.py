"""Prompts, outputs and bearer keys never reach any service's log: served, refused and abandoned
requests through the real gateway -> verify -> draft processes, then every log line is searched."""

from __future__ import annotations

import time

from service_support import CHAT, sse_events

SECRET_PROMPT = "confidential-zebra-quokka-4411 my bank PIN"
SECRET_KEY = "sk-never-log-me-90ab"


def test_no_prompt_output_or_key_in_any_service_log(stack, http):
    headers = {"Authorization": f"Bearer {SECRET_KEY}"}
    body = {"model": "target", "messages": [{"role": "user", "content": SECRET_PROMPT}], "max_tokens": 12, "temperature": 0}
    served = http.post(CHAT, json=body, headers=headers)
    assert served.status_code == 200
    output = served.json()["choices"][0]["message"]["content"]
    assert http.post(CHAT, json={**body, "max_tokens": 600}, headers=headers).status_code == 400  # refused by verify
    assert http.post(CHAT, json={**body, "temperature": -1}, headers=headers).status_code == 400  # refused by the gateway
    assert http.post("/v1/completions", json={"model": "target", "prompt": SECRET_PROMPT, "max_tokens": 4}, headers=headers).status_code == 200
    with http.stream("POST", CHAT, json={**body, "max_tokens": 300, "stream": True}, headers=headers) as response:
        next(sse_events(response.iter_lines()))  # then the client goes away
    time.sleep(0.5)  # log lines written at the end of the abandoned stream
    logs = {name: process.output() for name, process in stack.processes.items()}
    assert all(logs.values()) and "request" in logs["gateway"]  # the logs were captured (the audit line)
    for name, text in logs.items():
        secrets = [SECRET_PROMPT, "zebra-quokka", SECRET_KEY] + ([output.strip()[:24]] if len(output.strip()) >= 12 else [])
        for secret in secrets:
            assert secret not in text, f"{secret!r} in the {name} log"
