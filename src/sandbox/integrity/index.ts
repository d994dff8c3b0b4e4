export { FileMonitor, DEFAULT_FILE_MONITOR_OPTIONS, type FileMonitorOptions, type FileObservation } from './file-monitor.js';
export { handleIntegrity, releaseIntegrity } from './host-integrity.js';
export { RootMonitor } from './root-monitor.js';
