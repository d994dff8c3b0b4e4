// Terminal replay: the bash session of a rollout, rebuilt from its tool.call / tool.result
// events, shown one command at a time (step / play) in a terminal-looking pane.

// @ts-check

/** @typedef {{ callId: string|undefined, command: string, output: string|null, exitCode: number|null, error: boolean }} BashStep */

const BASH_NAMES = /bash|shell|terminal|run_command|execute_command/i;

/**
 * The bash steps of a rollout: `{callId, command, output|null, exitCode, error}` in call order;
 * `output` is null while the command runs. Pure; exported for tests.
 * @param {import('./types.js').RolloutEvent[]} events
 * @returns {BashStep[]}
 */
export function bashSteps(events) {
  /** @type {BashStep[]} */
  const steps = [];
  /** @type {Map<string|undefined, BashStep>} */
  const byId = new Map();
  for (const ev of events) {
    if (ev.type === 'tool.call') {
      const args = ev.arguments ?? {};
      const command = typeof args.command === 'string' ? args.command : typeof args.cmd === 'string' ? args.cmd : null;
      if (command === null || !BASH_NAMES.test(/** @type {string} */ (ev.name))) continue;
      /** @type {BashStep} */
      const step = { callId: ev.callId, command, output: null, exitCode: null, error: false };
      byId.set(ev.callId, step);
      steps.push(step);
    } else if (ev.type === 'tool.result') {
      const step = byId.get(ev.callId);
      if (step === undefined) continue;
      step.output = ev.output ?? '';
      step.exitCode = ev.exitCode ?? null;
      step.error = Boolean(ev.error);
    }
  }
  return steps;
}

/** A replay pane with step / play / reset / end controls. */
export class TerminalReplay {
  /**
   * @param {HTMLElement} root container; the pane and controls are built inside it
   * @param {{ intervalMs?: number }} [opts]
   */
  constructor(root, opts = {}) {
    this.intervalMs = opts.intervalMs ?? 700;
    /** @type {BashStep[]} */
    this.steps = [];
    this.pos = 0;
    this.follow = true;
    /** @type {ReturnType<typeof setInterval>|null} */
    this.timer = null;
    root.replaceChildren();
    const bar = document.createElement('div');
    bar.className = 'term-controls';
    /**
     * @param {string} name
     * @param {string} label
     * @param {() => void} fn
     */
    const button = (name, label, fn) => {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = `term-${name}`;
      b.textContent = label;
      b.addEventListener('click', fn);
      bar.append(b);
      return b;
    };
    button('reset', '« reset', () => this.reset());
    button('back', '‹ back', () => this.back());
    button('step', 'step ›', () => this.step());
    this.playButton = button('play', 'play', () => (this.timer === null ? this.play() : this.pause()));
    button('end', 'end »', () => this.end());
    this.posLabel = document.createElement('span');
    this.posLabel.className = 'term-pos';
    bar.append(this.posLabel);
    this.pane = document.createElement('pre');
    this.pane.className = 'term-pane';
    root.append(bar, this.pane);
    this.render();
  }

  /**
   * New steps for the same or another rollout; keeps following the end unless the user stepped back.
   * @param {BashStep[]} steps
   */
  setSteps(steps, sameRollout = true) {
    if (!sameRollout) {
      this.pause();
      this.follow = true;
    }
    this.steps = steps;
    if (this.follow) this.pos = steps.length;
    this.pos = Math.min(this.pos, steps.length);
    this.render();
  }

  step() {
    if (this.pos < this.steps.length) this.pos++;
    this.follow = this.pos === this.steps.length;
    if (this.follow) this.pause();
    this.render();
  }

  back() {
    this.pause();
    if (this.pos > 0) this.pos--;
    this.follow = false;
    this.render();
  }

  reset() {
    this.pause();
    this.pos = 0;
    this.follow = false;
    this.render();
  }

  end() {
    this.pause();
    this.pos = this.steps.length;
    this.follow = true;
    this.render();
  }

  play() {
    if (this.pos >= this.steps.length) this.pos = 0;
    this.follow = false;
    this.timer = setInterval(() => this.step(), this.intervalMs);
    this.playButton.textContent = 'pause';
    this.render();
  }

  pause() {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    if (this.playButton) this.playButton.textContent = 'play';
  }

  render() {
    const lines = [];
    for (const s of this.steps.slice(0, this.pos)) {
      lines.push(`$ ${s.command}`);
      if (s.output === null) lines.push('… running');
      else {
        if (s.output.length > 0) lines.push(s.output.replace(/\n$/, ''));
        if (s.exitCode !== null && s.exitCode !== 0) lines.push(`[exit ${s.exitCode}]`);
      }
    }
    if (this.steps.length === 0) lines.push('(no bash commands in this rollout)');
    this.pane.textContent = lines.join('\n');
    this.pane.scrollTop = this.pane.scrollHeight;
    this.posLabel.textContent = `${this.pos} / ${this.steps.length}`;
  }
}
