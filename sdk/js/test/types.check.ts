// Compiled by `npm run typecheck` (tsc --noEmit): the declarations describe a plugin in TypeScript.
import { Mapping, Metadata, Outcome, cache, defineReconciler, kinds, type Request } from "@wasmloop/sdk";
import { FakeCache } from "@wasmloop/sdk/testing";

const r = defineReconciler({
  metadata: () => new Metadata("t", "0").reconciles(kinds.NAMESPACE).watches(kinds.CONFIG_MAP, Mapping.namespace),
  reconcile(req: Request): Outcome {
    const cm = cache.get<{ data?: Record<string, string> }>(kinds.CONFIG_MAP, req.key.name, "c");
    return cm?.data ? new Outcome() : new Outcome().requeueAfter(1000);
  },
});
const fake: FakeCache = FakeCache.forReconciler(r);
const n: number = fake.converge({ ...kinds.NAMESPACE, name: "a" }).length;
void n;
