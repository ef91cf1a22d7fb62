// The playground: settings, sending, comparing speculation on and off, messages.

import { HttpError, StreamEndedEarly, StreamError, listModels, streamChat } from "./api.js";
import { RunStats, appendTokens, highlightRounds, showStats } from "./view.js";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "specdec.apiKey";  // sessionStorage: this tab only, never a URL or a cookie
const state = { maxModelLen: null, controller: null };
const statElements = {
  acceptance: $("stat-acceptance"), acceptedLength: $("stat-accepted-length"), speed: $("stat-speed"), rounds: $("stat-rounds"),
  tokens: $("stat-tokens"), ttft: $("stat-ttft"), chart: $("acceptance-chart"), chartSummary: $("chart-summary"),
};

const apiKey = () => $("api-key").value.trim();

function showMessage(text, kind = "error") {
  const message = $("message");
  message.textContent = text;
  message.dataset.kind = kind;
  message.hidden = !text;
}

function describeError(error) {
  if (error instanceof HttpError) {
    if (error.status === 401) return `401 Unauthorized: ${error.message}. Enter a valid API key in Settings.`;
    if (error.status === 429) {
      return `429 Too many requests: ${error.message}.${error.retryAfter ? ` Try again in ${error.retryAfter} s.` : ""}`;
    }
    if (error.status === 0) return `Network error: ${error.message}.`;
    return `${error.status} error: ${error.message}`;
  }
  if (error instanceof StreamEndedEarly) return `The stream ended early: ${error.message}. The output is incomplete.`;
  if (error instanceof StreamError) return `The server stopped the generation: ${error.message}`;
  return `Unexpected error: ${error.message}`;
}

/** The request for the current settings, or {error, field} saying what to fix (then nothing is sent). */
function readRequest() {
  for (const element of document.querySelectorAll("[aria-invalid]")) element.removeAttribute("aria-invalid");
  const invalid = (field, error) => ({ field, error: `${error} Nothing was sent.` });
  const prompt = $("prompt").value;
  if (!prompt.trim()) return invalid("prompt", "Enter a prompt first.");
  const maxTokens = Number($("max-tokens").value);
  if (!Number.isInteger(maxTokens) || maxTokens < 1) return invalid("max-tokens", "Max tokens must be a whole number of at least 1.");
  if (state.maxModelLen && maxTokens > state.maxModelLen) {
    return invalid("max-tokens", `Max tokens is ${maxTokens}, beyond this model's limit of ${state.maxModelLen} tokens (prompt included).`);
  }
  const temperature = Number($("temperature").value || 0);
  if (!(temperature >= 0 && temperature <= 2)) return invalid("temperature", "Temperature must be between 0 and 2.");
  const seed = $("seed").value === "" ? null : Number($("seed").value);
  if (seed !== null && !(Number.isSafeInteger(seed) && seed >= 0)) return invalid("seed", "The seed must be a whole number of at least 0.");
  const k = $("num-draft-tokens").value === "" ? null : Number($("num-draft-tokens").value);
  if (k !== null && !(Number.isInteger(k) && k >= 1 && k <= 64)) return invalid("num-draft-tokens", "K must be a whole number from 1 to 64.");
  const speculative = { provenance: true, acceptance: $("acceptance").value, ...(k === null ? {} : { num_draft_tokens: k }) };
  const body = { model: $("model").value, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature, speculative };
  if (seed !== null) body.seed = seed;
  return { body };
}

/** Streams one generation into `container`; `onProgress(stats)` after every chunk. */
async function generate(body, container, signal, onProgress) {
  const stats = new RunStats();
  let text = "", summary = null;
  try {
    for await (const chunk of streamChat(body, apiKey(), signal)) {
      summary = chunk.speculative ?? summary;
      for (const choice of chunk.choices ?? []) {
        const content = choice.delta?.content ?? "";
        const provenance = choice.provenance ?? { tokens: [], rounds: [] };
        text += content;
        appendTokens(container, content, provenance.tokens);
        stats.add(provenance.tokens, provenance.rounds);
      }
      onProgress?.(stats);
    }
  } finally {
    stats.finish();
    onProgress?.(stats);
  }
  return { stats, summary, text };
}

/** Runs `task` with `region` marked busy; its data-state ends as done, stopped or failed. */
async function running(region, task) {
  region.setAttribute("aria-busy", "true");
  region.dataset.state = "running";
  state.controller = new AbortController();
  for (const id of ["send", "compare"]) $(id).disabled = true;
  $("stop").disabled = false;
  try {
    await task(state.controller.signal);
    region.dataset.state = "done";
  } catch (error) {
    const stopped = error.name === "AbortError";
    region.dataset.state = stopped ? "stopped" : "failed";
    showMessage(stopped ? "Stopped: the output is incomplete." : describeError(error), stopped ? "info" : "error");
  } finally {
    region.setAttribute("aria-busy", "false");
    state.controller = null;
    for (const id of ["send", "compare"]) $(id).disabled = false;
    $("stop").disabled = true;
  }
}

/** The request, once the models are known; null (and a message) when it must not be sent. */
async function prepare() {
  if (state.controller) return null;
  if (!$("model").value && !(await loadModels())) return null;
  const { body, error, field } = readRequest();
  if (error) {
    showMessage(error);
    $(field).setAttribute("aria-invalid", "true");
    $(field).focus();
    return null;
  }
  showMessage("");
  return body;
}

async function send() {
  const body = await prepare();
  if (!body) return;
  body.speculative.enabled = $("speculative").checked;
  $("output").replaceChildren();
  await running($("run"), async (signal) => {
    const { summary } = await generate(body, $("output"), signal, (stats) => showStats(stats, statElements));
    if (summary?.fallback) showMessage("The draft failed during this request: the target finished alone (the text is the same).", "info");
  });
}

const timing = ({ stats }) => `${stats.seconds.toFixed(2)} s · ${stats.tokensPerSecond.toFixed(1)} tok/s · ${stats.tokens} tokens`;

async function compare() {
  const body = await prepare();
  if (!body) return;
  body.seed ??= Math.floor(Math.random() * 2 ** 31);  // one seed for both runs: coupled acceptance needs it
  const exact = body.temperature === 0 || body.speculative.acceptance === "coupled";
  const section = $("comparison");
  section.hidden = false;
  for (const id of ["output-on", "output-off", "timing-on", "timing-off", "verdict"]) $(id).replaceChildren();
  delete $("verdict").dataset.identical;
  await running(section, async (signal) => {
    const on = await generate({ ...body, speculative: { ...body.speculative, enabled: true } }, $("output-on"), signal,
      (stats) => showStats(stats, statElements));
    $("timing-on").textContent = timing(on);
    const off = await generate({ ...body, speculative: { ...body.speculative, enabled: false } }, $("output-off"), signal);
    $("timing-off").textContent = timing(off);
    showVerdict(on, off, exact, body.seed);
  });
}

function showVerdict(on, off, exact, seed) {
  const verdict = $("verdict");
  const speedup = on.stats.seconds > 0 ? `Speedup with speculation: ${(off.stats.seconds / on.stats.seconds).toFixed(2)}×. ` : "";
  if (!exact) {
    verdict.textContent = `${speedup}Rejection sampling above temperature 0 keeps the distribution, not the sample: `
      + "use temperature 0 or coupled acceptance to compare token for token.";
    return;
  }
  const identical = on.text === off.text;
  verdict.dataset.identical = String(identical);
  verdict.textContent = identical
    ? `✓ Identical text (seed ${seed}). ${speedup}`
    : `✗ The texts differ, which greedy and coupled acceptance must never do (seed ${seed}). ${speedup}`;
}

/** Fills the model list; false (and a message) when the server refused. */
async function loadModels() {
  try {
    const models = await listModels(apiKey());
    $("model").replaceChildren(...models.map(({ id }) => new Option(id, id)));
    state.maxModelLen = models[0]?.max_model_len ?? null;
    if (state.maxModelLen) $("max-tokens").max = String(state.maxModelLen);
    $("max-tokens-hint").textContent = state.maxModelLen ? `Up to ${state.maxModelLen} (the model's context, prompt included).` : "";
    if ($("message").dataset.kind === "auth") showMessage("");
    return true;
  } catch (error) {
    const needsKey = error instanceof HttpError && error.status === 401 && !apiKey();
    showMessage(needsKey ? "This server needs an API key: enter it in Settings." : describeError(error), needsKey ? "auth" : "error");
    return false;
  }
}

/** The prompt box grows with its text, up to the CSS max-height. */
function fitPrompt() {
  const prompt = $("prompt");
  prompt.style.height = "auto";
  prompt.style.height = `${prompt.scrollHeight + 2}px`;
}

function start() {
  $("api-key").value = sessionStorage.getItem(KEY_STORAGE) ?? "";
  $("api-key").addEventListener("input", () => {
    if (apiKey()) sessionStorage.setItem(KEY_STORAGE, apiKey());
    else sessionStorage.removeItem(KEY_STORAGE);
  });
  $("api-key").addEventListener("change", loadModels);
  $("prompt").addEventListener("input", fitPrompt);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $("prompt-form").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("compare").addEventListener("click", compare);
  $("stop").addEventListener("click", () => state.controller?.abort());
  for (const id of ["output", "output-on", "output-off"]) highlightRounds($(id), $("hovered"));
  loadModels();
}

start();
