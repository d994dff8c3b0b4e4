// The waterfall of one rollout: its stages (machine states), LLM calls and tool calls on one
// time axis, built from the events' runtime timestamps.

// @ts-check
import { fmtElapsed } from './format.js';

/**
 * @typedef {import('./types.js').RolloutEvent & { ts: number }} TimedEvent an event from the server (they all carry `ts`)
 * @typedef {{ lane: string, label: string, start: number, end: number|null, cls: string }} Span
 */

const MAX_ROWS = 400;

/**
 * Spans from a rollout's events: `{lane, label, start, end|null, cls}`, in start order.
 * A span still open ends at `now`. Pure; exported for tests.
 * @param {TimedEvent[]} events
 */
export function timelineSpans(events) {
  /** @type {Span[]} */
  const spans = [];
  /** @type {Span|null} */
  let stage = null;
  /** @type {Map<number|undefined, Span>} */
  const llm = new Map();
  /** @type {Map<string|undefined, Span>} */
  const tools = new Map();
  for (const ev of events) {
    switch (ev.type) {
      case 'rollout.state':
        if (stage !== null) stage.end = ev.ts;
        // A state event names its state, a tool event its tool (the runtime's schema).
        stage = { lane: 'stage', label: /** @type {string} */ (ev.state), start: ev.ts, end: null, cls: `stage-${ev.state}` };
        spans.push(stage);
        break;
      case 'llm.start': {
        const s = { lane: 'llm', label: `LLM turn ${ev.turn} (${ev.promptTokens} prompt tok)`, start: ev.ts, end: null, cls: 'llm' };
        llm.set(ev.turn, s);
        spans.push(s);
        break;
      }
      case 'llm.end': {
        let s = llm.get(ev.turn);
        if (s === undefined) {
          // The start fell outside the retained events: rebuild it from the latency.
          s = { lane: 'llm', label: '', start: ev.ts - (ev.latencyMs ?? 0), end: null, cls: 'llm' };
          spans.push(s);
        }
        s.end = ev.ts;
        s.label = `LLM turn ${ev.turn}: ${ev.outputTokens} tok on ${ev.backendId}${ev.finishReason !== 'stop' ? ` (${ev.finishReason})` : ''}`;
        llm.delete(ev.turn);
        break;
      }
      case 'tool.call': {
        /** @type {Span} */
        const s = { lane: 'tool', label: /** @type {string} */ (ev.name), start: ev.ts, end: null, cls: 'tool' };
        tools.set(ev.callId, s);
        spans.push(s);
        break;
      }
      case 'tool.result': {
        let s = tools.get(ev.callId);
        if (s === undefined) {
          s = { lane: 'tool', label: /** @type {string} */ (ev.name), start: ev.ts - (ev.latencyMs ?? 0), end: null, cls: 'tool' };
          spans.push(s);
        }
        s.end = ev.ts;
        s.label = `${ev.name}${ev.exitCode !== null && ev.exitCode !== undefined ? ` → ${ev.exitCode}` : ''}`;
        if (ev.error) s.cls = 'tool error';
        tools.delete(ev.callId);
        break;
      }
      case 'rollout.result':
        if (stage !== null && stage.end === null && ['done', 'failed', 'timedOut', 'cancelled'].includes(stage.label)) stage.end = ev.ts;
        break;
      default:
        break;
    }
  }
  // A final state has no duration; show it as an instant.
  if (stage !== null && ['done', 'failed', 'timedOut', 'cancelled'].includes(stage.label)) stage.end = stage.start;
  spans.sort((a, b) => a.start - b.start);
  return spans;
}


/**
 * Renders the waterfall into `root`, replacing its content. Rows past MAX_ROWS are summarized,
 * keeping the latest, so a very long rollout does not build an unbounded DOM.
 * @param {HTMLElement} root
 * @param {import('./types.js').RolloutEvent[]} events the rollout's events (from the server: each carries `ts`)
 * @param {number} now runtime clock, for spans still open
 */
export function renderTimeline(root, events, now) {
  let spans = timelineSpans(/** @type {TimedEvent[]} */ (events));
  root.replaceChildren();
  if (spans.length === 0) {
    root.textContent = 'no events yet';
    return;
  }
  const t0 = spans[0].start;
  const t1 = Math.max(now, ...spans.map((s) => s.end ?? now), t0 + 1);
  const total = t1 - t0;
  const hidden = spans.length > MAX_ROWS ? spans.length - MAX_ROWS : 0;
  if (hidden > 0) spans = spans.slice(hidden);
  const axis = document.createElement('div');
  axis.className = 'tl-axis';
  axis.textContent = `0 … ${fmtElapsed(total)}${hidden > 0 ? ` (${hidden} earlier spans not shown)` : ''}`;
  root.append(axis);
  const frag = document.createDocumentFragment();
  for (const s of spans) {
    const row = document.createElement('div');
    row.className = `tl-row lane-${s.lane}`;
    const label = document.createElement('span');
    label.className = 'tl-label';
    label.textContent = s.label;
    const track = document.createElement('span');
    track.className = 'tl-track';
    const bar = document.createElement('span');
    const end = s.end ?? now;
    bar.className = `tl-bar ${s.cls}${s.end === null ? ' open' : ''}`;
    bar.style.left = `${((s.start - t0) / total) * 100}%`;
    bar.style.width = `max(2px, ${((end - s.start) / total) * 100}%)`;
    bar.title = `${s.label}: ${fmtElapsed(end - s.start)} at +${fmtElapsed(s.start - t0)}`;
    track.append(bar);
    const dur = document.createElement('span');
    dur.className = 'tl-dur';
    dur.textContent = fmtElapsed(end - s.start);
    row.append(label, track, dur);
    frag.append(row);
  }
  root.append(frag);
}
