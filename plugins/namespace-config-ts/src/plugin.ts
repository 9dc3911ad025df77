// namespace-config, in TypeScript: for every Namespace labelled `wasmloop.dev/config=<profile>`,
// keeps a ConfigMap `wasmloop-config` in it (server-side applied), and deletes that ConfigMap
// when the label goes away. A port of plugins/namespace-config (Rust): same metadata, same
// actions on the same objects (tests/tests/polyglot.rs checks it).
//
// The ConfigMap's data holds the profile, `managed-by: wasmloop` and `profile-namespaces`, the
// number of Namespaces using the same profile, read through the declared label index
// `config-profile`. It watches ConfigMaps labelled `app.kubernetes.io/managed-by=wasmloop` with
// the `namespace` mapping: an edit or deletion of the ConfigMap reconciles its Namespace.

import { Mapping, Metadata, Outcome, Watch, cache, defineReconciler, isDeleting, kinds, label, withContext, type KubeObject, type Request } from "@wasmloop/sdk";

/** The Namespace label naming the profile. */
export const PROFILE_LABEL = "wasmloop.dev/config";
/** The declared index over PROFILE_LABEL on Namespaces. */
export const PROFILE_INDEX = "config-profile";
/** The ConfigMap kept in each labelled Namespace. */
export const CONFIG_MAP_NAME = "wasmloop-config";
/** The label marking ConfigMaps this plugin manages (and the only ones it watches). */
export const MANAGED_BY_LABEL = "app.kubernetes.io/managed-by";
export const MANAGED_BY = "wasmloop";
/** How often a labelled Namespace is reconciled to refresh `profile-namespaces` (ms). */
export const REFRESH_MS = 300_000;

type ConfigMap = KubeObject & { data?: Record<string, string> };

function isTerminating(ns: KubeObject): boolean {
  return isDeleting(ns) || (ns.status as { phase?: string } | undefined)?.phase === "Terminating";
}

/** The ConfigMap as this plugin wants it (the whole of its intent, for server-side apply). */
export function desiredConfigMap(namespace: string, profile: string, profileNamespaces: number): ConfigMap {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      name: CONFIG_MAP_NAME,
      namespace,
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [PROFILE_LABEL]: profile },
    },
    data: { profile, "managed-by": MANAGED_BY, "profile-namespaces": String(profileNamespaces) },
  };
}

/** Whether `current` already has the desired data and labels (extra labels are someone else's). */
function isUpToDate(current: ConfigMap, desired: ConfigMap): boolean {
  const want = desired.metadata?.labels ?? {};
  const labelsOk = Object.entries(want).every(([k, v]) => current.metadata?.labels?.[k] === v);
  return labelsOk && JSON.stringify(sorted(current.data)) === JSON.stringify(sorted(desired.data));
}

function sorted(data: Record<string, string> | undefined): [string, string][] | undefined {
  return data && Object.entries(data).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

export default defineReconciler({
  metadata: () =>
    new Metadata("namespace-config", "0.1.0")
      .reconciles(kinds.NAMESPACE)
      .watch(new Watch(kinds.CONFIG_MAP, Mapping.namespace).selector(`${MANAGED_BY_LABEL}=${MANAGED_BY}`))
      .index(kinds.NAMESPACE, PROFILE_INDEX, `labels.${PROFILE_LABEL}`),

  reconcile(req: Request): Outcome {
    const name = req.key.name;
    // Gone or terminating: the Namespace's deletion removes the ConfigMap.
    const ns = withContext("reading the Namespace", () => cache.getKey(req.key));
    if (!ns || isTerminating(ns)) return new Outcome();
    const current = withContext("reading the ConfigMap", () => cache.get<ConfigMap>(kinds.CONFIG_MAP, name, CONFIG_MAP_NAME));

    const profile = label(ns, PROFILE_LABEL);
    if (!profile) {
      // Unlabelled (or an empty profile): our ConfigMap must go. Only ConfigMaps carrying our
      // managed-by label are cached, so this never deletes someone else's.
      if (!current) return new Outcome();
      return new Outcome().delete(current).event(ns, "normal", "ConfigRemoved", `label ${PROFILE_LABEL} removed: deleted ConfigMap ${CONFIG_MAP_NAME}`);
    }

    const members = withContext("listing the profile's Namespaces", () => cache.byIndex(kinds.NAMESPACE, PROFILE_INDEX, profile));
    const count = members.filter((n) => !isTerminating(n)).length;
    const desired = desiredConfigMap(name, profile, count);

    const out = new Outcome();
    if (!current || !isUpToDate(current, desired)) {
      out.apply(desired);
      if (current?.data?.profile !== profile) {
        out.event(ns, "normal", "ConfigApplied", `applied profile ${JSON.stringify(profile)} to ConfigMap ${CONFIG_MAP_NAME} (${count} namespaces use it)`);
      }
    }
    return out.requeueAfter(REFRESH_MS);
  },
});
