// Types of @wasmloop/sdk/guest (used by the entry `wasmloop-js build` generates).

import type * as contract from "./contract.js";
import type { Metadata, Outcome, Reconciler, Request } from "./index.js";

export function toWitMetadata(metadata: Metadata): contract.PluginMetadata;
export function fromWitRequest(request: contract.Request): Request;
export function toWitOutcome(outcome: Outcome, u64?: (n: number) => unknown): contract.Outcome;
export function toWitError(e: unknown): contract.ReconcileError;
export function toWitFailure(e: unknown): contract.Failure;
export function exportPlugin(
  reconciler: Reconciler,
  options?: { bindings?: { cache: contract.CacheInterface; log: contract.LogInterface }; u64?: (n: number) => unknown; fail?: (err: contract.Failure) => never },
): contract.PluginInterface;
