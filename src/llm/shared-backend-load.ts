/**
 * Load on the backends from outside this process: the in-flight calls other backend pools (other
 * worker nodes of a cluster) have on them. A pool given one adds `remote(id)` to its own
 * in-flight count when it picks the least-loaded backend, so two nodes do not pile onto one
 * backend. Both directions are cheap, in-memory calls on the pick path: the implementation
 * publishes and learns loads in the background (the cluster's is `BackendLoadBoard`).
 */
export interface SharedBackendLoad {
  /** This pool's in-flight count on `backendId` is now `inFlight` (0 when it is removed). No I/O. */
  setLocal(backendId: string, inFlight: number): void;
  /** Calls on `backendId` from elsewhere, as last known (0 when unknown). */
  remote(backendId: string): number;
  /** `fn` runs whenever the remote loads changed, so the pool re-keys its heap. */
  onRemoteChange(fn: () => void): void;
}
