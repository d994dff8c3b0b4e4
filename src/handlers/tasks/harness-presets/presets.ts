import { HARNESS_PRESET_NAMES } from '../../../protocol/instance.js';

/**
 * The agent CLIs a `harness` instance may name as its `preset`: data (the npm package, its
 * binary, the tested version, the dialect it speaks) plus a small adapter writing the CLI's own
 * configuration and command line for one rollout. docs/harness-presets.md says per preset what
 * is written and why.
 *
 * Every adapter points the CLI at the rollout's proxy (its own config file or env, whichever the
 * CLI reads), turns off what would call elsewhere (telemetry, update checks, usage statistics,
 * background "memory" or title calls the policy did not ask for), turns approvals off (nobody
 * is there to approve), and runs it non-interactively on the instruction.
 */

/** What an adapter knows of the rollout it configures. */
export interface PresetRun {
  /** The proxy's OpenAI base URL as the sandbox sees it: `http://127.0.0.1:<port>/v1`. */
  baseUrl: string;
  /** The proxy's origin, without `/v1` (Anthropic and Google clients add their own path). */
  origin: string;
  /** The rollout's proxy key. */
  apiKey: string;
  /** The model name the CLI asks for (echoed back; the backend pool decides what samples). */
  model: string;
  instruction: string;
}

/** The wire format a CLI speaks to the proxy (src/proxy/: chat today; the others with the dialects). */
export type PresetDialect = 'chat' | 'responses' | 'anthropic' | 'google';

export interface HarnessPreset {
  /** The npm package, installed by `rollout harness install`. */
  readonly package: string;
  /** The binary's name in `node_modules/.bin`. */
  readonly bin: string;
  /** The version installed and run when an instance names none: tested here. */
  readonly defaultVersion: string;
  /** The model name used when an instance names none. */
  readonly defaultModel: string;
  readonly dialect: PresetDialect;
  /** Files written under `$HOME` before the CLI starts: path relative to `$HOME` → content. */
  files(run: PresetRun): Record<string, string>;
  /** Environment of the CLI (over the sandbox's, which already has OPENAI_BASE_URL / OPENAI_API_KEY). */
  env(run: PresetRun): Record<string, string>;
  /** Arguments after the binary (the instance's `args` are appended). */
  argv(run: PresetRun): string[];
}

const json = (v: unknown): string => `${JSON.stringify(v, null, 2)}\n`;
/** A TOML basic string (JSON's escapes are TOML's for the characters a URL or model name has). */
const toml = (s: string): string => JSON.stringify(s);

/** Codex (`@openai/codex`): Responses API through a custom provider in `$CODEX_HOME/config.toml`. */
const codex: HarnessPreset = {
  package: '@openai/codex',
  bin: 'codex',
  defaultVersion: '0.169.0',
  defaultModel: 'gpt-5-codex',
  dialect: 'responses',
  files: (r) => ({
    // Its own provider, not `openai`: the built-in one would log in to ChatGPT and call home.
    '.codex/config.toml': [
      `model = ${toml(r.model)}`,
      'model_provider = "rollout"',
      'approval_policy = "never"',
      'sandbox_mode = "danger-full-access"',
      'check_for_update_on_startup = false',
      '',
      '[model_providers.rollout]',
      'name = "rollout"',
      `base_url = ${toml(r.baseUrl)}`,
      'env_key = "OPENAI_API_KEY"',
      'wire_api = "responses"',
      '',
      '[analytics]',
      'enabled = false',
      '',
    ].join('\n'),
    '.codex/auth.json': json({ OPENAI_API_KEY: r.apiKey }),
  }),
  env: () => ({ CODEX_HOME: '$HOME/.codex' }),
  argv: (r) => ['exec', '--dangerously-bypass-approvals-and-sandbox', '--skip-git-repo-check', '--json', '--', r.instruction],
};

/** Claude Code (`@anthropic-ai/claude-code`): Anthropic Messages at ANTHROPIC_BASE_URL. */
const claudeCode: HarnessPreset = {
  package: '@anthropic-ai/claude-code',
  bin: 'claude',
  defaultVersion: '2.1.328',
  defaultModel: 'claude-sonnet-4-5',
  dialect: 'anthropic',
  files: () => ({
    '.claude/settings.json': json({ permissions: { defaultMode: 'bypassPermissions' }, autoUpdates: false }),
  }),
  env: (r) => ({
    CLAUDE_CONFIG_DIR: '$HOME/.claude',
    ANTHROPIC_BASE_URL: r.origin,
    ANTHROPIC_API_KEY: r.apiKey,
    ANTHROPIC_MODEL: r.model,
    ANTHROPIC_SMALL_FAST_MODEL: r.model,
    // Accepts --dangerously-skip-permissions as root too; the sandbox is the boundary.
    IS_SANDBOX: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1',
  }),
  argv: (r) => ['--verbose', '--output-format', 'stream-json', '--dangerously-skip-permissions', '-p', r.instruction],
};

/** Qwen Code (`@qwen-code/qwen-code`): OpenAI chat completions from OPENAI_* env; `~/.qwen/settings.json`. */
const qwenCode: HarnessPreset = {
  package: '@qwen-code/qwen-code',
  bin: 'qwen',
  defaultVersion: '0.24.4',
  defaultModel: 'qwen3-coder',
  dialect: 'chat',
  files: () => ({
    '.qwen/settings.json': json({
      general: { enableAutoUpdate: false },
      privacy: { usageStatisticsEnabled: false },
      telemetry: { enabled: false },
      // After the answer, qwen starts a "memory extraction" sub-agent (its own LLM calls): not the task's.
      memory: { enableManagedAutoMemory: false, enableManagedAutoDream: false, enableAutoSkill: false },
      ui: { enableFollowupSuggestions: false },
      model: { skipNextSpeakerCheck: true, skipLoopDetection: true },
      tools: { approvalMode: 'yolo' },
    }),
  }),
  env: (r) => ({ OPENAI_MODEL: r.model, QWEN_CODE_SUPPRESS_YOLO_WARNING: '1' }),
  argv: (r) => ['--yolo', '--prompt', r.instruction],
};

/** Pi (`@mariozechner/pi-coding-agent`): a provider of its own in `~/.pi/agent/models.json`. */
const pi: HarnessPreset = {
  package: '@mariozechner/pi-coding-agent',
  bin: 'pi',
  defaultVersion: '0.73.1',
  defaultModel: 'policy',
  dialect: 'chat',
  files: (r) => ({
    '.pi/agent/models.json': json({
      providers: {
        rollout: {
          baseUrl: r.baseUrl,
          apiKey: r.apiKey,
          api: 'openai-completions',
          // A plain OpenAI-compatible server: no developer role, reasoning effort or `store`.
          compat: { supportsDeveloperRole: false, supportsReasoningEffort: false, supportsStore: false, maxTokensField: 'max_tokens' },
          models: [{ id: r.model, contextWindow: 131072, maxTokens: 8192 }],
        },
      },
    }),
  }),
  env: () => ({ PI_OFFLINE: '1' }),
  argv: (r) => ['--print', '--mode', 'json', '--no-session', '--provider', 'rollout', '--model', r.model, r.instruction],
};

/** Gemini CLI (`@google/gemini-cli`): Google generateContent at GOOGLE_GEMINI_BASE_URL. */
const geminiCli: HarnessPreset = {
  package: '@google/gemini-cli',
  bin: 'gemini',
  defaultVersion: '0.61.0',
  defaultModel: 'gemini-2.5-pro',
  dialect: 'google',
  files: () => ({
    '.gemini/settings.json': json({
      general: { disableAutoUpdate: true, disableUpdateNag: true },
      privacy: { usageStatisticsEnabled: false },
      telemetry: { enabled: false },
      security: { auth: { selectedType: 'gemini-api-key' } },
    }),
  }),
  // Headless runs refuse an untrusted folder (exit 55); /workspace is the task's own.
  env: (r) => ({ GOOGLE_GEMINI_BASE_URL: r.origin, GEMINI_API_KEY: r.apiKey, GEMINI_MODEL: r.model, GEMINI_CLI_TRUST_WORKSPACE: 'true' }),
  argv: (r) => ['--approval-mode', 'yolo', '--model', r.model, '--prompt', r.instruction],
};

/** OpenCode (`opencode-ai`): an OpenAI-compatible provider in `~/.config/opencode/opencode.json`. */
const opencode: HarnessPreset = {
  package: 'opencode-ai',
  bin: 'opencode',
  defaultVersion: '1.18.33',
  defaultModel: 'policy',
  dialect: 'chat',
  files: (r) => ({
    '.config/opencode/opencode.json': json({
      $schema: 'https://opencode.ai/config.json',
      autoupdate: false,
      share: 'disabled',
      model: `rollout/${r.model}`,
      small_model: `rollout/${r.model}`,
      provider: { rollout: { npm: '@ai-sdk/openai-compatible', name: 'rollout', options: { baseURL: r.baseUrl, apiKey: r.apiKey }, models: { [r.model]: { name: r.model } } } },
      // The title agent's call would run beside the task's own: not the policy's work.
      agent: { title: { disable: true } },
      // `opencode run` is non-interactive: an "ask" would wait forever.
      permission: { edit: 'allow', bash: 'allow', webfetch: 'deny', external_directory: 'allow', doom_loop: 'allow' },
    }),
  }),
  env: () => ({ OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_SHARE: '1', OPENCODE_DISABLE_LSP_DOWNLOAD: '1', OPENCODE_DISABLE_MODELS_FETCH: '1' }),
  argv: (r) => ['run', '--format', 'json', '--model', `rollout/${r.model}`, '--', r.instruction],
};

/** The presets by name (the names are the protocol's, checked at submit). */
export const HARNESS_PRESETS: Record<PresetName, HarnessPreset> = {
  codex,
  'claude-code': claudeCode,
  'qwen-code': qwenCode,
  pi,
  'gemini-cli': geminiCli,
  opencode,
};

export type PresetName = (typeof HARNESS_PRESET_NAMES)[number];
/** The preset names, as the schema and the errors list them. */
export const PRESET_NAMES = HARNESS_PRESET_NAMES;
