export { HARNESS_PRESETS, PRESET_NAMES, type HarnessPreset, type PresetDialect, type PresetName, type PresetRun } from './presets.js';
export { HarnessStore, defaultHarnessStoreDir, parseHarnessRef, type HarnessRecord } from './harness-store.js';
export { presetCommand, shellQuote, type PresetInvocation } from './preset-command.js';
