// Validates Kiln's Kubernetes manifests against the Kubernetes and prometheus-operator schemas
// (npm kubernetes-models / @kubernetes-models/prometheus-operator, pinned in package.json), then
// checks that the pieces fit together (selectors, ports, probes, config keys, the store's shape).
//
//   node validate-k8s.mjs [--config-table README.md] [--no-render] DIR_OR_FILE...
//
// A directory with a kustomization.yaml (an overlay: deploy/k8s/overlays/embedded, .../farm) is
// rendered here with the subset of kustomize that Kiln's manifests use (resources, strategic-merge
// patches, namespace, labels, images), every resource file schema-checked on its own and every
// rendered object checked, with the cross checks on the rendered set. When `kubectl` is on PATH
// (or $KUBECTL names it) and --no-render is not given, `kubectl kustomize` renders it too: its
// objects are checked the same way and must equal this renderer's. Exit 0: all valid; 1: errors
// (each printed); 2: usage or missing node_modules (run `npm ci` in deploy/).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
let YAML;
try {
  YAML = require("yaml");
  require.resolve("kubernetes-models/apps/v1/Deployment");
  require.resolve("@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor");
} catch (e) {
  console.error(`validate-k8s: npm packages missing in ${here}/node_modules (${e.message.split("\n")[0]}).`);
  console.error(`validate-k8s: run 'npm ci --ignore-scripts' in ${here} (needs the npm registry once).`);
  process.exit(2);
}

const errors = [];
const err = (where, msg) => errors.push(`${where}: ${msg}`);

function modelPath(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") return null;
  if (apiVersion === "monitoring.coreos.com/v1")
    return `@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${kind}`;
  return `kubernetes-models/${apiVersion}/${kind}`;
}

function schemaCheck(where, doc) {
  const mp = modelPath(doc.apiVersion, doc.kind);
  let Model;
  try {
    Model = mp && require(mp)[doc.kind];
  } catch {
    Model = null;
  }
  if (!Model) return err(where, `no schema for apiVersion '${doc.apiVersion}' kind '${doc.kind}'`);
  try {
    new Model(doc).validate();
  } catch (e) {
    const details = (e.errors || []).map((x) => `${x.instancePath || "/"} ${x.message}`).join("; ");
    err(where, `${doc.kind} ${doc.metadata?.name}: schema: ${details || e.message}`);
  }
}

// kilnd's settings from the README's configuration table (which `kilnd --print-config-markdown`
// generates from server/config.cc; a test keeps them identical): YAML key -> {env, flag, def}.
function kilndKeys(table) {
  if (!table || !fs.existsSync(table)) return null;
  const keys = new Map();
  for (const line of fs.readFileSync(table, "utf8").split("\n")) {
    // "| `--flag` | `KILN_FLAG` | `flag` (deprecated: `old_key`) | ARG | default | help |": the old key still works.
    // Cells may hold escaped pipes ("server\|worker").
    const m = line.match(/^\| `(--[\w-]+)` \| `(KILN_[A-Z_]+)` \| `([a-z_]+)`(?: \(deprecated: `([a-z_]+)`\))? \|(?:\\\||[^|])*\| ((?:\\\||[^|])*) \|/);
    if (!m) continue;
    const s = { flag: m[1], env: m[2], key: m[3], def: m[5].trim() };
    keys.set(m[3], s);
    if (m[4]) keys.set(m[4], s);
  }
  return keys.size ? keys : null;
}

// KILN_* variables the image sets (docker/Dockerfile ENV) and their values: they override the
// config file.
function imageEnv(dockerfile) {
  const vars = new Map();
  if (!fs.existsSync(dockerfile)) return vars;
  const text = fs.readFileSync(dockerfile, "utf8").replace(/\\\n/g, " ");
  for (const line of text.split("\n")) {
    if (/^ENV\s/.test(line)) for (const m of line.matchAll(/(KILN_[A-Z_]+)=(\S*)/g)) vars.set(m[1], m[2]);
  }
  return vars;
}
const IMAGE_ENV = imageEnv(path.join(here, "..", "docker", "Dockerfile"));

const matches = (selector, labels) =>
  selector && Object.keys(selector).length > 0 &&
  Object.entries(selector).every(([k, v]) => labels && labels[k] === v);

// Kubernetes quantities ("8Gi", "500M", "1073741824") in bytes; NaN when unparsable.
function bytes(q) {
  if (q == null) return NaN;
  const m = String(q).match(/^([0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$/);
  if (!m) return NaN;
  const mult = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18 };
  return Number(m[1]) * (m[2] ? mult[m[2]] : 1);
}

const DB_URL = /postgres(ql)?:\/\//i;
const WORKLOAD_KINDS = new Set(["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"]);

// What kilnd (or a kiln-worker, the same binary) in container c would run with: its --config
// file from a mounted ConfigMap, then KILN_* from the image and the pod, then flags in args (each
// one winning over the one before). Also checks the config file's keys.
function effectiveConfig(where, c, vols, docs, configKeys) {
  const cfg = new Map(); // key -> {value, from}
  const args = c.args || [];
  const i = args.indexOf("--config");
  const cfgPath = i >= 0 ? args[i + 1] : undefined;
  const cfgMount = (c.volumeMounts || []).find((m) => cfgPath && cfgPath.startsWith(m.mountPath + "/"));
  const cfgVol = cfgMount && vols.get(cfgMount.name);
  const cm = cfgVol?.configMap && docs.find((d) => d.kind === "ConfigMap" && d.metadata?.name === cfgVol.configMap.name);
  const podEnv = new Map((c.env || []).map((e) => [e.name, e]));
  if (!cfgVol?.configMap) err(where, `--config ${cfgPath} is not inside a mounted ConfigMap`);
  else if (!cm) err(where, `config volume names ConfigMap '${cfgVol.configMap.name}', which is not among the manifests`);
  else {
    const file = path.basename(cfgPath);
    const text = cm.data?.[file];
    if (!text) err(where, `ConfigMap ${cm.metadata.name} has no key '${file}'`);
    else {
      let parsed = null;
      try { parsed = YAML.parse(text); } catch (e) { err(where, `ConfigMap ${cm.metadata.name} ${file}: YAML: ${e.message}`); }
      for (const [k, v] of Object.entries(parsed || {})) {
        const s = configKeys?.get(k);
        if (configKeys && !s) { err(where, `${c.name} config key '${k}' is unknown to kilnd (server/config.cc)`); continue; }
        if (s && (IMAGE_ENV.has(s.env) || podEnv.has(s.env))) {
          err(where, `${c.name} config key '${k}' has no effect: ${s.env} (${IMAGE_ENV.has(s.env) ? "image ENV" : "pod env"}) overrides the file`);
          continue;
        }
        cfg.set(s ? s.key : k, { value: String(v), from: `ConfigMap ${cm.metadata.name}` });
      }
    }
  }
  if (configKeys) {
    const byEnv = new Map([...configKeys.values()].map((s) => [s.env, s]));
    const byFlag = new Map([...configKeys.values()].map((s) => [s.flag, s]));
    for (const [name, value] of IMAGE_ENV) if (byEnv.has(name)) cfg.set(byEnv.get(name).key, { value, from: "image ENV" });
    for (const e of c.env || []) {
      if (byEnv.has(e.name)) cfg.set(byEnv.get(e.name).key, { value: e.value ?? "(from a reference)", from: "pod env" });
    }
    for (let j = 0; j < args.length; j++) {
      const [flag, inline] = args[j].split(/=(.*)/s);
      if (byFlag.has(flag)) cfg.set(byFlag.get(flag).key, { value: inline ?? args[j + 1], from: "args" });
    }
  }
  // The value kilnd runs with: the manifests' or the table's default.
  const get = (key) => cfg.get(key)?.value ?? configKeys?.get(key)?.def.split(" ")[0];
  return { cfg, get, cm, cfgPath };
}

// Checks of one pod template running the kiln image (kilnd, or a kiln-worker) and its config.
function checkKilnPod(where, w, cname, docs, configKeys) {
  const pod = w.spec.template;
  const podLabels = pod?.metadata?.labels || {};
  if (!matches(w.spec.selector?.matchLabels, podLabels)) err(where, `${w.kind} ${w.metadata.name} selector does not match its pod labels`);
  const c = (pod?.spec?.containers || []).find((x) => x.name === cname);
  if (!c) { err(where, `${w.kind} ${w.metadata.name} has no container '${cname}'`); return null; }
  const ports = Object.fromEntries((c.ports || []).map((p) => [p.name, p.containerPort]));
  if (ports.grpc !== 50051) err(where, `${cname}: container port 'grpc' is ${ports.grpc}, want 50051`);
  if (ports.metrics !== 9464) err(where, `${cname}: container port 'metrics' is ${ports.metrics}, want 9464`);
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    if (c[probe]?.grpc?.port !== 50051) err(where, `${cname}: ${probe} is not a gRPC probe on 50051`);
  }
  if (!c.resources?.requests?.cpu || !c.resources?.limits?.memory) err(where, `${cname} needs cpu requests and memory limits`);
  const psc = pod.spec.securityContext || {};
  if (psc.runAsNonRoot !== true || !(psc.runAsUser > 0)) err(where, `${cname}: pod must run as a non-root uid`);
  if (c.securityContext?.readOnlyRootFilesystem !== true) err(where, `${cname} must have a read-only root filesystem`);
  if (c.securityContext?.allowPrivilegeEscalation !== false) err(where, `${cname} must set allowPrivilegeEscalation: false`);
  const vols = new Map((pod.spec.volumes || []).map((v) => [v.name, v]));
  for (const m of c.volumeMounts || []) if (!vols.has(m.name)) err(where, `${cname}: volumeMount '${m.name}' has no volume`);
  for (const e of c.env || []) {
    if (!/^KILN_[A-Z_]+$/.test(e.name)) err(where, `${cname}: env ${e.name} is not a KILN_ variable`);
  }
  const conf = effectiveConfig(where, c, vols, docs, configKeys);
  const dataMount = (c.volumeMounts || []).find((m) => m.mountPath === "/var/lib/kiln");
  const data = dataMount && vols.get(dataMount.name);
  // emptyDirs on disk count against the pod's ephemeral storage: they must fit its limit, or
  // the kubelet evicts the pod when they fill.
  let emptyDirBytes = 0;
  for (const v of vols.values()) {
    if (!v.emptyDir || v.emptyDir.medium === "Memory") continue;
    const b = bytes(v.emptyDir.sizeLimit);
    if (!(b > 0)) err(where, `${cname}: emptyDir volume '${v.name}' needs a sizeLimit`);
    else emptyDirBytes += b;
  }
  const ephemeral = (pod.spec.containers || []).reduce((s, x) => s + (bytes(x.resources?.limits?.["ephemeral-storage"]) || 0), 0);
  if (ephemeral > 0 && emptyDirBytes > ephemeral)
    err(where, `${cname}: the emptyDirs' sizeLimits (${emptyDirBytes} bytes) exceed the pod's ephemeral-storage limit (${ephemeral} bytes)`);
  // SIGTERM drains (kilnd: health NOT_SERVING, in-flight calls get shutdown_grace; a worker stops
  // claiming and finishes or releases its jobs within it; then the jobs' last writes get up to
  // 10 s, server/daemon.cc Shutdown): the pod must get longer than that.
  const grace = Number(conf.get("shutdown_grace"));
  const tgps = pod.spec.terminationGracePeriodSeconds ?? 30;
  if (grace > 0 && !(tgps > grace + 10)) err(where, `${cname}: terminationGracePeriodSeconds (${tgps}) must exceed shutdown_grace + 10 s (${grace + 10}) for a graceful drain`);
  // The database URL: only from a file in a mounted Secret (--database-url-file).
  const dbFile = conf.cfg.get("database_url_file")?.value;
  if (dbFile) {
    const m = (c.volumeMounts || []).find((x) => dbFile.startsWith(x.mountPath + "/"));
    const v = m && vols.get(m.name);
    const rel = m && dbFile.slice(m.mountPath.length + 1);
    if (!v?.secret) err(where, `${cname}: database_url_file ${dbFile} is not in a mounted Secret`);
    else if (v.secret.items && !v.secret.items.some((it) => it.path === rel))
      err(where, `${cname}: database_url_file ${dbFile}: Secret volume '${v.name}' has no item with path '${rel}'`);
    else if (v.secret.optional === true) err(where, `${cname}: the database Secret volume must not be optional (the pod would start on an embedded store)`);
  }
  for (const e of c.env || []) {
    if (e.name === "KILN_DATABASE" && e.value !== undefined) err(where, `${cname}: KILN_DATABASE with a literal value: the database URL belongs in a Secret (database_url_file)`);
  }
  return { c, pod, podLabels, vols, conf, data, dbFile };
}

// Kiln-specific checks over one complete set of objects.
function crossCheck(where, docs, configKeys) {
  const byKind = (k) => docs.filter((d) => d.kind === k);
  const need = (k) => {
    const list = byKind(k);
    if (list.length === 0) err(where, `no ${k}`);
    return list;
  };
  const hasContainer = (d, name) => WORKLOAD_KINDS.has(d.kind) && (d.spec?.template?.spec?.containers || []).some((c) => c.name === name);
  const deps = docs.filter((d) => d.kind === "Deployment" && hasContainer(d, "kilnd"));
  if (deps.length !== 1) err(where, deps.length ? "more than one kilnd Deployment" : "no Deployment with a container 'kilnd'");
  const dep = deps[0];
  const [svc] = need("Service");
  const [hpa] = need("HorizontalPodAutoscaler");
  const [pdb] = need("PodDisruptionBudget");
  const [sm] = need("ServiceMonitor");
  need("ConfigMap");
  // The database URL is a credential: never in a ConfigMap, args or a literal env value.
  for (const d of docs) {
    if (d.kind === "ConfigMap") {
      for (const [k, v] of Object.entries(d.data || {})) if (DB_URL.test(String(v))) err(where, `ConfigMap ${d.metadata.name} key ${k} holds a database URL: put it in Secret kiln-database (database_url_file)`);
    }
    if (!WORKLOAD_KINDS.has(d.kind)) continue;
    for (const c of [...(d.spec.template?.spec?.containers || []), ...(d.spec.template?.spec?.initContainers || [])]) {
      if ([...(c.command || []), ...(c.args || [])].some((a) => DB_URL.test(String(a)))) err(where, `${d.kind} ${d.metadata.name} container ${c.name}: a database URL on the command line (visible in ps): use database_url_file`);
      for (const e of c.env || []) if (e.value !== undefined && DB_URL.test(String(e.value))) err(where, `${d.kind} ${d.metadata.name} container ${c.name}: env ${e.name} holds a database URL: use a Secret`);
    }
  }
  if (!dep) return;
  const k = checkKilnPod(where, dep, "kilnd", docs, configKeys);
  if (!k) return;
  const { podLabels, vols, conf, data } = k;
  const role = conf.get("role");
  if (role && role !== "server") err(where, `kilnd Deployment runs with role '${role}', want server`);
  const replicas = dep.spec.replicas ?? 1;
  const claimOf = (v) => v?.persistentVolumeClaim && docs.find((d) => d.kind === "PersistentVolumeClaim" && d.metadata.name === v.persistentVolumeClaim.claimName);
  if (!k.dbFile) {
    // Embedded store: one kilnd owns it (flock on its LOCK); no second pod, neither from a
    // rollout nor from the HPA, whatever the volume's access mode.
    need("PersistentVolumeClaim");
    if (!data?.persistentVolumeClaim) err(where, "/var/lib/kiln must be a PersistentVolumeClaim (the embedded model store; without database_url_file)");
    else if (!claimOf(data)) err(where, "the data volume's claim is not among the manifests");
    if (dep.spec.strategy?.type !== "Recreate") err(where, "an embedded model store needs strategy Recreate (no two kilnd pods on one store)");
    if (hpa && hpa.spec.maxReplicas !== 1) err(where, "an embedded model store needs HPA maxReplicas 1 (kilnd replicas cannot share a store)");
    if (replicas !== 1) err(where, "an embedded model store needs replicas: 1");
  } else {
    // Shared state in PostgreSQL: the data dir holds only this replica's upload spool and blob cache.
    const claim = claimOf(data);
    const scales = replicas > 1 || (hpa && hpa.spec.maxReplicas > 1) || dep.spec.strategy?.type !== "Recreate";
    if (claim && !(claim.spec.accessModes || []).includes("ReadWriteMany") && scales)
      err(where, `kilnd replicas (replicas ${replicas}, HPA max ${hpa?.spec.maxReplicas}, ${dep.spec.strategy?.type ?? "RollingUpdate"}) cannot share the ReadWriteOnce claim ${claim.metadata.name}, and one kilnd per data dir: use an emptyDir for the spool and blob cache`);
    if (data?.emptyDir) {
      const size = bytes(data.emptyDir.sizeLimit);
      const need = Number(conf.get("blob_cache_bytes")) + Number(conf.get("max_upload_bytes_in_flight"));
      if (size > 0 && !(need <= size))
        err(where, `kilnd: blob_cache_bytes + max_upload_bytes_in_flight (${need}) do not fit the data emptyDir (sizeLimit ${data.emptyDir.sizeLimit})`);
    }
  }
  if (svc) {
    if (!matches(svc.spec.selector, podLabels)) err(where, "Service selector does not match the kilnd pods");
    const sp = Object.fromEntries((svc.spec.ports || []).map((p) => [p.name, p.targetPort]));
    if (sp.grpc !== "grpc" && sp.grpc !== 50051) err(where, "Service port 'grpc' does not target the container's grpc port");
    if (sp.metrics !== "metrics" && sp.metrics !== 9464) err(where, "Service port 'metrics' does not target the container's metrics port");
  }
  if (hpa) {
    const t = hpa.spec.scaleTargetRef;
    if (t.kind !== "Deployment" || t.name !== dep.metadata.name) err(where, `HPA targets ${t.kind}/${t.name}, not the kilnd Deployment`);
    if (!(hpa.spec.minReplicas >= 1) || !(hpa.spec.maxReplicas >= hpa.spec.minReplicas)) err(where, "HPA replica bounds are wrong");
    else if (replicas < hpa.spec.minReplicas || replicas > hpa.spec.maxReplicas) err(where, `kilnd replicas (${replicas}) outside the HPA's bounds ${hpa.spec.minReplicas}..${hpa.spec.maxReplicas}`);
  }
  if (pdb) {
    if (!matches(pdb.spec.selector?.matchLabels, podLabels)) err(where, "PodDisruptionBudget selector does not match the kilnd pods");
    // A budget that allows no eviction blocks every node drain.
    const min = hpa?.spec.minReplicas ?? replicas;
    const { minAvailable, maxUnavailable } = pdb.spec;
    if (maxUnavailable === 0 || maxUnavailable === "0%" || (typeof minAvailable === "number" && minAvailable >= min) || minAvailable === "100%")
      err(where, `PodDisruptionBudget ${pdb.metadata.name} allows no voluntary disruption of kilnd (${min} replica(s)): node drains would block`);
  }
  if (sm && svc) {
    if (!matches(sm.spec.selector?.matchLabels, svc.metadata.labels)) err(where, "ServiceMonitor selector does not match the Service's labels");
    for (const ep of sm.spec.endpoints || []) {
      if (!(svc.spec.ports || []).some((p) => p.name === ep.port)) err(where, `ServiceMonitor endpoint port '${ep.port}' is not a Service port`);
    }
    // The alert rules select job="kiln".
    if (sm.spec.jobLabel) {
      if (svc.metadata.labels?.[sm.spec.jobLabel] !== "kiln") err(where, `Service label ${sm.spec.jobLabel} (the job label) must be 'kiln'`);
    } else if (svc.metadata.name !== "kiln") err(where, "without jobLabel the job label is the Service name, which must be 'kiln'");
  }
  // Device workers: the same image in the worker role, on the farm's database.
  for (const w of docs.filter((d) => hasContainer(d, "kiln-worker"))) {
    const wk = checkKilnPod(where, w, "kiln-worker", docs, configKeys);
    if (!wk) continue;
    if (wk.conf.get("role") !== "worker") err(where, `kiln-worker runs with role '${wk.conf.get("role")}', want worker (role: worker in its config)`);
    if (!wk.dbFile) err(where, "kiln-worker needs the farm's database: database_url_file in a mounted Secret");
    if (!wk.conf.cfg.has("devices")) err(where, "kiln-worker: no devices configured (devices: BACKEND:N,...)");
    if (!k.dbFile) err(where, "kiln-worker next to a kilnd without a database: workers claim jobs from the farm's shared database only");
    const lease = Number(wk.conf.get("job_lease_seconds")), beat = Number(wk.conf.get("job_heartbeat_seconds"));
    if (!(beat < lease)) err(where, `kiln-worker: job_heartbeat_seconds (${beat}) must be below job_lease_seconds (${lease})`);
    const ps = wk.pod.spec;
    const aff = ps.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution;
    if (!Object.keys(ps.nodeSelector || {}).length && !aff) err(where, `${w.kind} ${w.metadata.name} selects no nodes (nodeSelector or required node affinity): workers belong on device hosts`);
    if (w.kind === "Deployment" && (w.spec.replicas ?? 1) > 1 && !ps.affinity?.podAntiAffinity && !ps.topologySpreadConstraints)
      err(where, `Deployment ${w.metadata.name}: several workers and nothing keeps them on different hosts`);
    for (const v of wk.vols.values()) {
      const claim = claimOf(v);
      if (claim && !(claim.spec.accessModes || []).includes("ReadWriteMany") && (w.kind === "DaemonSet" || (w.spec.replicas ?? 1) > 1))
        err(where, `${w.kind} ${w.metadata.name}: several workers cannot share the ReadWriteOnce claim ${claim.metadata.name}`);
    }
    if (wk.data?.emptyDir) {
      const size = bytes(wk.data.emptyDir.sizeLimit);
      const cache = Number(wk.conf.get("blob_cache_bytes"));
      if (size > 0 && !(cache < size)) err(where, `kiln-worker: blob_cache_bytes (${cache}) does not fit the data emptyDir (sizeLimit ${wk.data.emptyDir.sizeLimit})`);
    }
    // Scraped: a PodMonitor (or ServiceMonitor via a Service) selecting the worker pods' metrics port, job "kiln".
    const pms = byKind("PodMonitor").filter((m) => matches(m.spec.selector?.matchLabels, wk.podLabels));
    const viaSvc = byKind("Service").filter((s) => matches(s.spec.selector, wk.podLabels))
      .some((s) => byKind("ServiceMonitor").some((m) => matches(m.spec.selector?.matchLabels, s.metadata.labels)));
    if (!pms.length && !viaSvc) err(where, `no PodMonitor or ServiceMonitor scrapes the ${w.metadata.name} pods`);
    for (const m of pms) {
      for (const ep of m.spec.podMetricsEndpoints || []) {
        if (!(wk.c.ports || []).some((p) => p.name === ep.port)) err(where, `PodMonitor ${m.metadata.name} endpoint port '${ep.port}' is not a kiln-worker container port`);
      }
      if (!m.spec.jobLabel || wk.podLabels[m.spec.jobLabel] !== "kiln") err(where, `PodMonitor ${m.metadata.name}: the job label must be 'kiln' (jobLabel naming a pod label whose value is kiln)`);
    }
  }
}

// ---- The subset of kustomize Kiln's manifests use -------------------------------------------
// Kubernetes manifests are YAML 1.1 to kubectl (defaultMode: 0440 is octal); so here too.
function loadDocs(file) {
  return YAML.parseAllDocuments(fs.readFileSync(file, "utf8"), { version: "1.1" }).map((d, i) => {
    if (d.errors.length) err(`${file}#${i}`, `YAML: ${d.errors[0].message}`);
    return d.toJS();
  }).filter((d) => d != null);
}

const KUSTOMIZE_KEYS = new Set(["apiVersion", "kind", "namespace", "labels", "resources", "patches", "images"]);
const CLUSTER_SCOPED = new Set(["Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume", "StorageClass", "PriorityClass"]);
const isBuiltin = (d) => !String(d.apiVersion).includes(".") || /\.k8s\.io\//.test(d.apiVersion);
// Strategic merge: the lists that merge by a key (k8s.io/api patchMergeKey); other lists are replaced.
const MERGE_KEYS = { containers: "name", initContainers: "name", ephemeralContainers: "name", volumes: "name", env: "name",
  volumeMounts: "mountPath", imagePullSecrets: "name", hostAliases: "ip", topologySpreadConstraints: "topologyKey" };
const clone = (x) => (x === undefined ? x : JSON.parse(JSON.stringify(x)));
const isMap = (x) => x != null && typeof x === "object" && !Array.isArray(x);

function mergeKeyOf(key, trail, kind) {
  if (key === "ports") return trail.includes("containers") || trail.includes("initContainers") ? "containerPort" : kind === "Service" ? "port" : null;
  return MERGE_KEYS[key] || null;
}

// A strategic-merge patch (or, for custom resources, a JSON merge patch): maps merge, null
// deletes, `$patch: delete|replace`; keyed lists merge item by item (patch items first, in patch
// order, then the remaining ones, as kustomize orders them).
function strategicMerge(base, patch, trail, kind, builtin, where) {
  if (!isMap(patch)) return clone(patch);
  if (patch.$patch === "replace") { const p = clone(patch); delete p.$patch; return p; }
  const out = isMap(base) ? clone(base) : {};
  for (const [key, pv] of Object.entries(patch)) {
    if (key === "$patch") { if (pv !== "delete") err(where, `unsupported $patch: ${pv}`); continue; }
    if (key.startsWith("$")) { err(where, `unsupported patch directive ${key}`); continue; }
    if (pv === null) { delete out[key]; continue; }
    if (isMap(pv) && pv.$patch === "delete") { delete out[key]; continue; }
    const bv = out[key];
    const mk = builtin && Array.isArray(pv) && Array.isArray(bv) ? mergeKeyOf(key, trail, kind) : null;
    if (mk) {
      const result = [];
      const used = new Set();
      for (const item of pv) {
        const j = bv.findIndex((b) => isMap(b) && isMap(item) && b[mk] === item[mk]);
        if (j >= 0) used.add(j);
        if (isMap(item) && item.$patch === "delete") continue;
        result.push(j >= 0 ? strategicMerge(bv[j], item, [...trail, key], kind, builtin, where) : strategicMerge(undefined, item, [...trail, key], kind, builtin, where));
      }
      bv.forEach((b, j) => { if (!used.has(j)) result.push(b); });
      out[key] = result;
    } else if (isMap(pv) && isMap(bv)) out[key] = strategicMerge(bv, pv, [...trail, key], kind, builtin, where);
    else out[key] = strategicMerge(undefined, pv, [...trail, key], kind, builtin, where);
  }
  return out;
}

// kustomize's label field specs for what Kiln uses (labels with includeSelectors: true).
function addLabels(d, pairs, selectors) {
  const put = (obj, ...keys) => {
    let o = obj;
    for (const k of keys) { if (!isMap(o[k])) o[k] = {}; o = o[k]; }
    Object.assign(o, pairs);
  };
  const addIfThere = (o) => { if (isMap(o?.matchLabels)) Object.assign(o.matchLabels, pairs); };
  d.metadata ||= {};
  put(d, "metadata", "labels");
  if (!selectors) return;
  if (d.kind === "Service") { if (isMap(d.spec?.selector)) Object.assign(d.spec.selector, pairs); }
  if (d.kind === "PodDisruptionBudget") put(d.spec, "selector", "matchLabels");
  if (WORKLOAD_KINDS.has(d.kind)) {
    put(d.spec, "selector", "matchLabels");
    put(d.spec, "template", "metadata", "labels");
    const ps = d.spec.template.spec || {};
    for (const t of ps.topologySpreadConstraints || []) addIfThere(t.labelSelector);
    for (const a of ["podAffinity", "podAntiAffinity"]) {
      for (const t of ps.affinity?.[a]?.requiredDuringSchedulingIgnoredDuringExecution || []) addIfThere(t.labelSelector);
      for (const t of ps.affinity?.[a]?.preferredDuringSchedulingIgnoredDuringExecution || []) addIfThere(t.podAffinityTerm?.labelSelector);
    }
  }
}

function setImages(d, images) {
  const ps = d.spec?.template?.spec;
  if (!ps) return;
  for (const c of [...(ps.containers || []), ...(ps.initContainers || [])]) {
    const m = String(c.image).match(/^(.*?)(?::([^:/@]+))?(?:@(.+))?$/);
    const img = images.find((i) => i.name === m[1]);
    if (!img) continue;
    let s = img.newName ?? m[1];
    if (img.digest) s += `@${img.digest}`;
    else if (img.newTag) s += `:${img.newTag}`;
    else if (m[2]) s += `:${m[2]}`;
    c.image = s;
  }
}

// Renders the kustomization in dir; every resource file is schema-checked as it is read.
function render(dir, seen = []) {
  const kfile = path.join(dir, "kustomization.yaml");
  if (!fs.existsSync(kfile)) { err(dir, "no kustomization.yaml"); return []; }
  if (seen.includes(path.resolve(dir))) { err(kfile, "resources form a cycle"); return []; }
  const k = YAML.parse(fs.readFileSync(kfile, "utf8"));
  if (k.apiVersion !== "kustomize.config.k8s.io/v1beta1" || k.kind !== "Kustomization") err(kfile, "not a kustomize.config.k8s.io/v1beta1 Kustomization");
  for (const key of Object.keys(k)) if (!KUSTOMIZE_KEYS.has(key)) err(kfile, `unknown key '${key}' (validate-k8s renders ${[...KUSTOMIZE_KEYS].join(", ")})`);
  const listed = new Set([...(k.resources || []), ...(k.patches || []).map((p) => p.path).filter(Boolean)]);
  for (const f of fs.readdirSync(dir)) {
    if (/\.ya?ml$/.test(f) && f !== "kustomization.yaml" && !listed.has(f)) err(kfile, `${f} is not listed in resources or patches`);
  }
  const docs = [];
  for (const r of k.resources || []) {
    const f = path.join(dir, r);
    if (!fs.existsSync(f)) { err(kfile, `resource ${r} does not exist`); continue; }
    if (fs.statSync(f).isDirectory()) { docs.push(...render(f, [...seen, path.resolve(dir)])); continue; }
    for (const [i, d] of loadDocs(f).entries()) { schemaCheck(`${f}#${i}`, d); docs.push(d); }
  }
  for (const p of k.patches || []) {
    const where = `${kfile} patch ${p.path ?? "(inline)"}`;
    if (p.target || p.options) { err(where, "patches with target or options are not rendered by validate-k8s: use a strategic-merge patch naming its object"); continue; }
    let pdocs;
    if (p.path) {
      const f = path.join(dir, p.path);
      if (!fs.existsSync(f)) { err(where, "does not exist"); continue; }
      pdocs = loadDocs(f);
    } else pdocs = YAML.parseAllDocuments(String(p.patch), { version: "1.1" }).map((d) => d.toJS()).filter((d) => d != null);
    for (const pd of pdocs) {
      if (!isMap(pd) || !pd.kind || !pd.metadata?.name) { err(where, "not a strategic-merge patch (apiVersion, kind, metadata.name)"); continue; }
      const hits = docs.filter((d) => d.kind === pd.kind && d.metadata?.name === pd.metadata.name && String(d.apiVersion).split("/")[0] === String(pd.apiVersion).split("/")[0]);
      if (hits.length !== 1) { err(where, `${pd.kind}/${pd.metadata.name} matches ${hits.length} objects, want 1`); continue; }
      const j = docs.indexOf(hits[0]);
      docs[j] = strategicMerge(hits[0], pd, [], pd.kind, isBuiltin(pd), where);
    }
  }
  for (const d of docs) {
    if (k.namespace && !CLUSTER_SCOPED.has(d.kind)) (d.metadata ||= {}).namespace = k.namespace;
    for (const l of k.labels || []) addLabels(d, l.pairs || {}, l.includeSelectors === true);
    if (k.images) setImages(d, k.images);
  }
  const ids = new Set();
  for (const d of docs) {
    const id = `${d.kind}/${d.metadata?.namespace ?? ""}/${d.metadata?.name}`;
    if (ids.has(id)) err(kfile, `${d.kind} ${d.metadata?.name} is defined twice`);
    ids.add(id);
  }
  return docs;
}

// JSON with sorted keys, for comparing renderings.
const canon = (x) => JSON.stringify(x, (_, v) => (isMap(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : v));
const idOf = (d) => `${d.kind}/${d.metadata?.name}`;

function checkDir(dir, configKeys) {
  const docs = render(dir);
  const k = YAML.parse(fs.readFileSync(path.join(dir, "kustomization.yaml"), "utf8") || "{}") || {};
  for (const d of docs) {
    schemaCheck(`${dir} (rendered) ${idOf(d)}`, d);
    if (k.namespace && !CLUSTER_SCOPED.has(d.kind) && d.metadata?.namespace !== k.namespace) err(dir, `rendered ${idOf(d)} is not in namespace ${k.namespace}`);
  }
  crossCheck(dir, docs, configKeys);
  if (noRender) return docs.length;
  const kubectl = process.env.KUBECTL || "kubectl";
  let rendered = null;
  try {
    rendered = execFileSync(kubectl, ["kustomize", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    if (e.code === "ENOENT") console.log(`validate-k8s: ${kubectl} not found; ${dir} rendered by validate-k8s only`);
    else err(dir, `kubectl kustomize failed: ${(e.stderr || e.message).trim()}`);
  }
  if (rendered != null) {
    const out = YAML.parseAllDocuments(rendered, { version: "1.1" }).map((d) => d.toJS()).filter((d) => d != null);
    for (const d of out) schemaCheck(`${dir} (kustomize) ${idOf(d)}`, d);
    crossCheck(`${dir} (kustomize)`, out, configKeys);
    // This renderer must agree with kustomize, or its checks above were of something else.
    const mine = new Map(docs.map((d) => [idOf(d), canon(d)]));
    const theirs = new Map(out.map((d) => [idOf(d), canon(d)]));
    for (const id of new Set([...mine.keys(), ...theirs.keys()])) {
      if (!mine.has(id)) err(dir, `kubectl kustomize renders ${id}, validate-k8s does not`);
      else if (!theirs.has(id)) err(dir, `validate-k8s renders ${id}, kubectl kustomize does not`);
      else if (mine.get(id) !== theirs.get(id)) {
        const a = mine.get(id), b = theirs.get(id);
        let i = 0;
        while (i < a.length && a[i] === b[i]) i++;
        err(dir, `${id}: validate-k8s's rendering differs from kubectl kustomize's at ...${a.slice(Math.max(0, i - 60), i + 40)} vs ...${b.slice(Math.max(0, i - 60), i + 40)}`);
      }
    }
    console.log(`validate-k8s: ${dir}: kubectl kustomize rendered ${out.length} objects, the same as validate-k8s`);
  }
  return docs.length;
}

const argv = process.argv.slice(2);
let configH = path.join(here, "..", "README.md");
let noRender = false;
const targets = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--config-table") configH = argv[++i];
  else if (argv[i] === "--no-render") noRender = true;
  else targets.push(argv[i]);
}
if (targets.length === 0) {
  console.error("usage: node validate-k8s.mjs [--config-table README.md] [--no-render] DIR_OR_FILE...");
  process.exit(2);
}
const configKeys = kilndKeys(configH);
if (!configKeys) err(configH, "cannot read kilnd's config keys");
let count = 0;
for (const t of targets) {
  if (!fs.existsSync(t)) { err(t, "does not exist"); continue; }
  if (fs.statSync(t).isDirectory()) count += checkDir(t, configKeys) || 0;
  else for (const [i, d] of loadDocs(t).entries()) { schemaCheck(`${t}#${i}`, d); count++; }
}
if (errors.length) {
  for (const e of errors) console.error(`FAIL ${e}`);
  console.error(`validate-k8s: ${errors.length} error(s)`);
  process.exit(1);
}
console.log(`validate-k8s: ${count} objects valid`);
