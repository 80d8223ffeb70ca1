// Validates Kiln's Kubernetes manifests against the Kubernetes and prometheus-operator schemas
// (npm kubernetes-models / @kubernetes-models/prometheus-operator, pinned in package.json), then
// checks that the pieces fit together (selectors, ports, probes, config keys).
//
//   node validate-k8s.mjs [--config-table README.md] [--no-render] DIR_OR_FILE...
//
// A directory with a kustomization.yaml is checked file by file and, when `kubectl` is on PATH
// (or $KUBECTL names it), also as rendered by `kubectl kustomize` (unless --no-render). Exit 0: all valid; 1: errors
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
  return apiVersion.includes("/") ? `kubernetes-models/${apiVersion}/${kind}` : `kubernetes-models/${apiVersion}/${kind}`;
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

// kilnd's YAML keys and the KILN_* variable of each, from the README's configuration table (which
// `kilnd --print-config-markdown` generates from server/config.cc; a test keeps them identical).
function kilndKeys(table) {
  if (!table || !fs.existsSync(table)) return null;
  const keys = new Map();
  for (const line of fs.readFileSync(table, "utf8").split("\n")) {
    // "| `--flag` | `KILN_FLAG` | `flag` (deprecated: `old_key`) |": the old key still works.
    const m = line.match(/^\| `--[\w-]+` \| `(KILN_[A-Z_]+)` \| `([a-z_]+)`(?: \(deprecated: `([a-z_]+)`\))? \|/);
    if (m) keys.set(m[2], m[1]);
    if (m && m[3]) keys.set(m[3], m[1]);
  }
  return keys.size ? keys : null;
}

// KILN_* variables the image sets (docker/Dockerfile ENV): they override the config file.
function imageEnv(dockerfile) {
  const names = new Set();
  if (!fs.existsSync(dockerfile)) return names;
  const text = fs.readFileSync(dockerfile, "utf8").replace(/\\\n/g, " ");
  for (const line of text.split("\n")) {
    if (/^ENV\s/.test(line)) for (const m of line.matchAll(/(KILN_[A-Z_]+)=/g)) names.add(m[1]);
  }
  return names;
}
const IMAGE_ENV = imageEnv(path.join(here, "..", "docker", "Dockerfile"));

const matches = (selector, labels) =>
  selector && Object.keys(selector).length > 0 &&
  Object.entries(selector).every(([k, v]) => labels && labels[k] === v);

// Kiln-specific checks over one complete set of objects.
function crossCheck(where, docs, configKeys) {
  const byKind = (k) => docs.filter((d) => d.kind === k);
  const need = (k) => {
    const list = byKind(k);
    if (list.length === 0) err(where, `no ${k}`);
    return list;
  };
  const [dep] = need("Deployment");
  const [svc] = need("Service");
  const [hpa] = need("HorizontalPodAutoscaler");
  const [pdb] = need("PodDisruptionBudget");
  const [sm] = need("ServiceMonitor");
  const [cm] = need("ConfigMap");
  need("PersistentVolumeClaim");
  if (!dep) return;
  const pod = dep.spec.template;
  const podLabels = pod.metadata?.labels || {};
  if (!matches(dep.spec.selector?.matchLabels, podLabels)) err(where, "Deployment selector does not match its pod labels");
  const c = (pod.spec.containers || []).find((x) => x.name === "kilnd");
  if (!c) return err(where, "Deployment has no container 'kilnd'");
  const ports = Object.fromEntries((c.ports || []).map((p) => [p.name, p.containerPort]));
  if (ports.grpc !== 50051) err(where, `container port 'grpc' is ${ports.grpc}, want 50051`);
  if (ports.metrics !== 9464) err(where, `container port 'metrics' is ${ports.metrics}, want 9464`);
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    if (c[probe]?.grpc?.port !== 50051) err(where, `${probe} is not a gRPC probe on 50051`);
  }
  if (!c.resources?.requests?.cpu || !c.resources?.limits?.memory) err(where, "kilnd needs cpu requests and memory limits");
  const psc = pod.spec.securityContext || {};
  if (psc.runAsNonRoot !== true || !(psc.runAsUser > 0)) err(where, "pod must run as a non-root uid");
  if (c.securityContext?.readOnlyRootFilesystem !== true) err(where, "kilnd must have a read-only root filesystem");
  if (c.securityContext?.allowPrivilegeEscalation !== false) err(where, "kilnd must set allowPrivilegeEscalation: false");
  const vols = new Map((pod.spec.volumes || []).map((v) => [v.name, v]));
  for (const m of c.volumeMounts || []) if (!vols.has(m.name)) err(where, `volumeMount '${m.name}' has no volume`);
  const data = (c.volumeMounts || []).find((m) => m.mountPath === "/var/lib/kiln");
  if (!data || !vols.get(data.name)?.persistentVolumeClaim) err(where, "/var/lib/kiln must be a PersistentVolumeClaim");
  else if (!docs.some((d) => d.kind === "PersistentVolumeClaim" && d.metadata.name === vols.get(data.name).persistentVolumeClaim.claimName))
    err(where, "the data volume's claim is not among the manifests");
  // --config must point into the mounted ConfigMap, whose file must hold only keys kilnd knows.
  const args = c.args || [];
  const cfgPath = args[args.indexOf("--config") + 1];
  const cfgMount = (c.volumeMounts || []).find((m) => cfgPath && cfgPath.startsWith(m.mountPath + "/"));
  const cfgVol = cfgMount && vols.get(cfgMount.name);
  if (!cfgVol?.configMap) err(where, `--config ${cfgPath} is not inside a mounted ConfigMap`);
  else if (cm && cfgVol.configMap.name !== cm.metadata.name) err(where, `config volume names ConfigMap '${cfgVol.configMap.name}', manifests have '${cm.metadata.name}'`);
  else if (cm) {
    const file = path.basename(cfgPath);
    const text = cm.data?.[file];
    if (!text) err(where, `ConfigMap ${cm.metadata.name} has no key '${file}'`);
    else {
      const cfg = YAML.parse(text);
      const podEnv = new Set((c.env || []).map((e) => e.name));
      for (const k of Object.keys(cfg || {})) {
        if (!configKeys) break;
        const env = configKeys.get(k);
        if (!env) err(where, `kilnd config key '${k}' is unknown to kilnd (server/config.cc)`);
        else if (IMAGE_ENV.has(env) || podEnv.has(env)) err(where, `kilnd config key '${k}' has no effect: ${env} (${IMAGE_ENV.has(env) ? "image ENV" : "pod env"}) overrides the file`);
      }
    }
  }
  for (const e of c.env || []) {
    if (!/^KILN_[A-Z_]+$/.test(e.name)) err(where, `env ${e.name} is not a KILN_ variable`);
  }
  if (svc) {
    if (!matches(svc.spec.selector, podLabels)) err(where, "Service selector does not match the kilnd pods");
    const sp = Object.fromEntries((svc.spec.ports || []).map((p) => [p.name, p.targetPort]));
    if (sp.grpc !== "grpc" && sp.grpc !== 50051) err(where, "Service port 'grpc' does not target the container's grpc port");
    if (sp.metrics !== "metrics" && sp.metrics !== 9464) err(where, "Service port 'metrics' does not target the container's metrics port");
  }
  // One kilnd per model store: a ReadWriteOnce data volume allows no second pod (rollout or HPA).
  const claim = data && docs.find((d) => d.kind === "PersistentVolumeClaim" && d.metadata.name === vols.get(data.name)?.persistentVolumeClaim?.claimName);
  if (claim && !(claim.spec.accessModes || []).includes("ReadWriteMany")) {
    if (dep.spec.strategy?.type !== "Recreate") err(where, "a ReadWriteOnce model store needs strategy Recreate (no two kilnd pods on one store)");
    if (hpa && hpa.spec.maxReplicas !== 1) err(where, "a ReadWriteOnce model store needs HPA maxReplicas 1 (kilnd replicas cannot share a store)");
    if ((dep.spec.replicas ?? 1) !== 1) err(where, "a ReadWriteOnce model store needs replicas: 1");
  }
  if (hpa) {
    const t = hpa.spec.scaleTargetRef;
    if (t.kind !== "Deployment" || t.name !== dep.metadata.name) err(where, `HPA targets ${t.kind}/${t.name}, not the kilnd Deployment`);
    if (!(hpa.spec.minReplicas >= 1) || !(hpa.spec.maxReplicas >= hpa.spec.minReplicas)) err(where, "HPA replica bounds are wrong");
  }
  if (pdb && !matches(pdb.spec.selector?.matchLabels, podLabels)) err(where, "PodDisruptionBudget selector does not match the kilnd pods");
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
}

function loadDocs(file) {
  return YAML.parseAllDocuments(fs.readFileSync(file, "utf8")).map((d, i) => {
    if (d.errors.length) err(`${file}#${i}`, `YAML: ${d.errors[0].message}`);
    return d.toJS();
  }).filter((d) => d != null);
}

const KUSTOMIZE_KEYS = new Set(["apiVersion", "kind", "namespace", "labels", "commonLabels", "resources", "images", "configMapGenerator", "secretGenerator", "patches", "components", "namePrefix", "nameSuffix"]);

function checkDir(dir, configKeys) {
  const kfile = path.join(dir, "kustomization.yaml");
  if (!fs.existsSync(kfile)) return err(dir, "no kustomization.yaml");
  const k = YAML.parse(fs.readFileSync(kfile, "utf8"));
  if (k.apiVersion !== "kustomize.config.k8s.io/v1beta1" || k.kind !== "Kustomization") err(kfile, "not a kustomize.config.k8s.io/v1beta1 Kustomization");
  for (const key of Object.keys(k)) if (!KUSTOMIZE_KEYS.has(key)) err(kfile, `unknown key '${key}'`);
  const listed = new Set(k.resources || []);
  for (const f of fs.readdirSync(dir)) {
    if (/\.ya?ml$/.test(f) && f !== "kustomization.yaml" && !listed.has(f)) err(kfile, `${f} is not listed in resources`);
  }
  const docs = [];
  for (const r of listed) {
    const f = path.join(dir, r);
    if (!fs.existsSync(f)) { err(kfile, `resource ${r} does not exist`); continue; }
    for (const [i, d] of loadDocs(f).entries()) { schemaCheck(`${f}#${i}`, d); docs.push(d); }
  }
  crossCheck(dir, docs, configKeys);
  const kubectl = process.env.KUBECTL || "kubectl";
  let rendered = null;
  if (noRender) return docs.length;
  try {
    rendered = execFileSync(kubectl, ["kustomize", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    if (e.code === "ENOENT") console.log(`validate-k8s: ${kubectl} not found; ${dir} checked file by file only`);
    else err(dir, `kubectl kustomize failed: ${(e.stderr || e.message).trim()}`);
  }
  if (rendered != null) {
    const out = YAML.parseAllDocuments(rendered).map((d) => d.toJS()).filter((d) => d != null);
    if (out.length !== docs.length) err(dir, `kustomize rendered ${out.length} objects, the files hold ${docs.length}`);
    for (const d of out) {
      schemaCheck(`${dir} (kustomize) ${d.kind}/${d.metadata?.name}`, d);
      if (k.namespace && d.kind !== "Namespace" && d.metadata?.namespace !== k.namespace) err(dir, `rendered ${d.kind}/${d.metadata?.name} is not in namespace ${k.namespace}`);
    }
    crossCheck(`${dir} (kustomize)`, out, configKeys);
    console.log(`validate-k8s: ${dir}: kubectl kustomize rendered ${out.length} objects`);
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
  if (fs.statSync(t).isDirectory()) count += checkDir(t, configKeys) || 0;
  else for (const [i, d] of loadDocs(t).entries()) { schemaCheck(`${t}#${i}`, d); count++; }
}
if (errors.length) {
  for (const e of errors) console.error(`FAIL ${e}`);
  console.error(`validate-k8s: ${errors.length} error(s)`);
  process.exit(1);
}
console.log(`validate-k8s: ${count} objects valid`);
