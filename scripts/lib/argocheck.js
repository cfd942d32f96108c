// Argo Rollouts objects, section 5 of scripts/validate-deploy.sh (its only caller): each Rollout and
// AnalysisTemplate validated with @kubernetes-models/argo-rollouts, plus a walk over the model's own
// JSON schema for field names it does not know (the library's validate() accepts unknown fields).
// usage: NPM_PREFIX=<dir with node_modules> node scripts/lib/argocheck.js <rendered.yaml as JSON lines>
// Prints "  ok   Kind/name" or "  FAIL Kind/name: why" per object; exits 1 on any FAIL.
const fs = require("fs");
const path = require("path");
const prefix = process.env.NPM_PREFIX;
const pkg = path.join(prefix, "node_modules/@kubernetes-models/argo-rollouts");
const models = require(path.join(pkg, "argoproj.io/v1alpha1"));
const docs = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean).map(JSON.parse);
let failed = 0, checked = 0;
// Fields that are real but newer than the pinned model (0.3.2 predates them). Each entry says
// since when; nothing else may be unknown.
const NEWER = new Set([
  ".spec.workloadRef.scaleDown",   // Argo Rollouts >= 1.5: scale the referenced Deployment down
]);
// The model files embed their JSON schema as `const schema = {...};` — read it for the field walk.
function schemaOf(kind) {
  const src = fs.readFileSync(path.join(pkg, "argoproj.io/v1alpha1", kind + ".js"), "utf8");
  const m = src.match(/const schema = (\{[\s\S]*?\n\});\n/);
  return m ? JSON.parse(m[1]) : null;
}
function walk(obj, schema, where, out) {
  if (!schema || obj === null || typeof obj !== "object") return;
  if (Array.isArray(obj)) { obj.forEach((v, i) => walk(v, schema.items, `${where}[${i}]`, out)); return; }
  const props = schema.properties && Object.keys(schema.properties).length ? schema.properties : null;
  if (props && !schema["x-kubernetes-preserve-unknown-fields"]) {
    for (const k of Object.keys(obj)) {
      if (where === "" && (k === "metadata" || k === "apiVersion" || k === "kind")) continue;
      if (!(k in schema.properties)) { if (!NEWER.has(`${where}.${k}`)) out.push(`${where}.${k}`); }
      else walk(obj[k], schema.properties[k], `${where}.${k}`, out);
    }
  } else if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
    for (const k of Object.keys(obj)) walk(obj[k], schema.additionalProperties, `${where}.${k}`, out);
  }
}
for (const d of docs) {
  if (!d.apiVersion || !d.apiVersion.startsWith("argoproj.io/")) continue;
  const Model = models[d.kind];
  const name = `${d.kind}/${d.metadata.name}`;
  if (!Model) { console.log(`  FAIL ${name}: no model for kind ${d.kind}`); failed++; continue; }
  checked++;
  try { new Model(d).validate(); } catch (e) { console.log(`  FAIL ${name}: ${e.message}`); failed++; continue; }
  const unknown = [];
  walk(d, schemaOf(d.kind), "", unknown);
  if (unknown.length) { console.log(`  FAIL ${name}: unknown fields ${unknown.join(", ")}`); failed++; }
  else console.log(`  ok   ${name}`);
}
if (!checked) { console.log("  FAIL no Argo Rollouts objects found"); failed++; }
process.exit(failed ? 1 : 0);
