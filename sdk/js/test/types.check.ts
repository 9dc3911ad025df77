// Compiled by `npm run typecheck` (tsc --noEmit): the declarations describe a plugin in TypeScript.
import { IndexValue, Mapping, Metadata, Outcome, Watch, cache, defineReconciler, kind, kinds, transient, type ObjectKey, type Request } from "@wasmloop/sdk";
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

// Contract 0.3: index mappings, annotation selectors, failures carrying actions.
const FOO = kind("example.com/v1", "Foo");
const named = defineReconciler({
  metadata: () =>
    new Metadata("named", "0")
      .reconciles(FOO)
      .annotationSelector("example.com/managed=true")
      .namedBy(kinds.DEPLOYMENT, "deployment", "spec.deploymentName", IndexValue.name)
      .watches(kinds.CONFIG_MAP, Mapping.index("deployment", IndexValue.field("metadata.labels.app")))
      .watch(new Watch(kinds.SECRET, Mapping.sameName).annotationSelector("!example.com/skip")),
  reconcile(req: Request): Outcome {
    throw transient("not yet").withActions(new Outcome().eventKey(req.key, "warning", "NotYet", "waiting"));
  },
});
const keys: ObjectKey[] = FakeCache.forReconciler(named).mappedKeys({ ...kinds.DEPLOYMENT, namespace: "a", name: "web" });
void keys;
