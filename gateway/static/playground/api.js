// The gateway's OpenAI-compatible API, as the page uses it: same origin, the key in a header only.

/** An HTTP error answer, with the OpenAI error body's message. */
export class HttpError extends Error {
  constructor(status, message, retryAfter) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

/** An error the server sent inside a stream that had already started. */
export class StreamError extends Error {}

/** The stream stopped before the server's final `[DONE]`: the output is incomplete. */
export class StreamEndedEarly extends Error {}

function headers(apiKey, json) {
  const result = {};
  if (apiKey) result.Authorization = `Bearer ${apiKey}`;
  if (json) result["Content-Type"] = "application/json";
  return result;
}

async function httpError(response) {
  let message = response.statusText || "request failed";
  try {
    const body = await response.json();
    message = body?.error?.message || message;
  } catch {
    // not an OpenAI error body: keep the status text
  }
  return new HttpError(response.status, message, response.headers.get("Retry-After"));
}

async function send(path, options) {
  try {
    return await fetch(path, options);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new HttpError(0, `could not reach the server (${error.message})`);
  }
}

/** GET /v1/models: [{id, max_model_len}]. */
export async function listModels(apiKey) {
  const response = await send("/v1/models", { headers: headers(apiKey, false) });
  if (!response.ok) throw await httpError(response);
  return (await response.json()).data;
}

/** POST /v1/chat/completions with stream: true; yields each chunk until [DONE]. */
export async function* streamChat(body, apiKey, signal) {
  const response = await send("/v1/chat/completions", {
    method: "POST", headers: headers(apiKey, true), body: JSON.stringify({ ...body, stream: true }), signal,
  });
  if (!response.ok) throw await httpError(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    let read;
    try {
      read = await reader.read();
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new StreamEndedEarly("the connection dropped before the server finished");
    }
    if (read.done) break;
    buffer += read.value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice("data: ".length);
        if (data === "[DONE]") return;
        const payload = JSON.parse(data);
        if (payload.error) throw new StreamError(payload.error.message);
        yield payload;
      }
    }
  }
  throw new StreamEndedEarly("the connection closed before the server finished");
}
