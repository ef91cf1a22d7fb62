// Rendering: tokens coloured by source, the live statistics and the acceptance-by-position chart.

const SVG = "http://www.w3.org/2000/svg";
export const SOURCE_LABELS = {
  draft: "draft model", lookup: "prompt lookup", suffix: "suffix decoding", prediction: "prediction", target: "target",
};

/** Appends a streamed choice's tokens to `container`: one element per token, with its source and round.
 *  Text released without a token of its own (held back until the end) is added as plain text. */
export function appendTokens(container, text, tokens) {
  let covered = 0;
  for (const token of tokens) {
    const element = document.createElement("span");
    element.className = "token";
    element.dataset.source = token.source;
    element.dataset.round = String(token.round);
    element.title = `round ${token.round} · ${SOURCE_LABELS[token.source] ?? token.source}`;
    element.textContent = token.text;
    container.append(element);
    covered += token.text.length;
  }
  if (text.length > covered) container.append(document.createTextNode(text.slice(covered)));
}

/** Hovering a token highlights its whole round and names it in `label`. */
export function highlightRounds(container, label) {
  const clear = () => {
    for (const element of container.querySelectorAll(".in-round")) element.classList.remove("in-round");
  };
  container.addEventListener("mouseover", (event) => {
    const token = event.target.closest?.(".token");
    if (!token) return;
    clear();
    for (const element of container.querySelectorAll(`.token[data-round="${token.dataset.round}"]`)) element.classList.add("in-round");
    if (label) label.textContent = token.title;
  });
  container.addEventListener("mouseleave", clear);
}

/** What one generation measured so far, from its chunks' provenance. */
export class RunStats {
  constructor() {
    this.started = performance.now();
    this.firstTokenAt = null;
    this.finishedAt = null;
    this.tokens = 0;
    this.rounds = [];  // {drafted, accepted}
  }

  add(tokens, rounds) {
    if (tokens.length && this.firstTokenAt === null) this.firstTokenAt = performance.now();
    this.tokens += tokens.length;
    this.rounds.push(...rounds);
  }

  finish() {
    this.finishedAt = performance.now();
  }

  get seconds() {
    return ((this.finishedAt ?? performance.now()) - this.started) / 1000;
  }

  get tokensPerSecond() {
    return this.seconds > 0 ? this.tokens / this.seconds : 0;
  }

  get drafted() {
    return this.rounds.reduce((sum, round) => sum + round.drafted, 0);
  }

  get accepted() {
    return this.rounds.reduce((sum, round) => sum + round.accepted, 0);
  }

  /** For each draft position i: the share of rounds that drafted an i-th candidate and accepted it. */
  acceptanceByPosition() {
    const deepest = Math.max(0, ...this.rounds.map((round) => round.drafted));
    return Array.from({ length: deepest }, (_, index) => {
      const reached = this.rounds.filter((round) => round.drafted > index);
      const kept = reached.filter((round) => round.accepted > index).length;
      return { position: index + 1, rounds: reached.length, rate: reached.length ? kept / reached.length : 0 };
    });
  }
}

const percent = (value) => `${Math.round(value * 100)}%`;

/** Writes `stats` into the statistics panel (elements by id) and redraws the chart. */
export function showStats(stats, elements) {
  const drafted = stats.drafted, accepted = stats.accepted, rounds = stats.rounds.length;
  elements.acceptance.textContent = drafted ? `${percent(accepted / drafted)} (${accepted}/${drafted})` : "no drafts";
  elements.acceptedLength.textContent = rounds ? (stats.tokens / rounds).toFixed(2) : "–";
  elements.speed.textContent = stats.tokensPerSecond.toFixed(1);
  elements.rounds.textContent = String(rounds);
  elements.tokens.textContent = String(stats.tokens);
  elements.ttft.textContent = stats.firstTokenAt === null ? "–" : `${Math.round(stats.firstTokenAt - stats.started)} ms`;
  drawChart(elements.chart, elements.chartSummary, stats.acceptanceByPosition());
}

function svg(name, attributes, text) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  if (text !== undefined) element.textContent = text;
  return element;
}

function drawChart(chart, summary, positions) {
  const width = 280, height = 120, left = 30, bottom = 18, top = 14;
  const plot = height - bottom - top;
  const parts = [svg("line", { x1: left, y1: top + plot, x2: width, y2: top + plot, class: "axis" })];
  for (const tick of [0, 0.5, 1]) {
    parts.push(svg("text", { x: left - 4, y: top + plot * (1 - tick) + 3, class: "tick", "text-anchor": "end" }, percent(tick)));
  }
  const slot = (width - left) / Math.max(positions.length, 1);
  for (const { position, rate, rounds } of positions) {
    const x = left + (position - 1) * slot + slot * 0.15;
    const barHeight = Math.max(plot * rate, rate > 0 ? 1 : 0);
    const bar = svg("rect", { x, y: top + plot - barHeight, width: slot * 0.7, height: barHeight, class: "bar" });
    bar.append(svg("title", {}, `position ${position}: ${percent(rate)} of ${rounds} rounds`));
    parts.push(bar);
    parts.push(svg("text", { x: x + slot * 0.35, y: height - 5, class: "tick", "text-anchor": "middle" }, String(position)));
    parts.push(svg("text", { x: x + slot * 0.35, y: top + plot - barHeight - 3, class: "value", "text-anchor": "middle" }, percent(rate)));
  }
  chart.replaceChildren(...parts);
  summary.textContent = positions.length
    ? `Draft positions 1–${positions.length}: ${positions.map(({ position, rate }) => `${position}: ${percent(rate)}`).join(", ")}.`
    : "No drafted rounds yet.";
}
