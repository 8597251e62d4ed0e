// Checks Kubernetes manifests against the API's schemas, offline, with the
// npm packages kubernetes-models (types, enums, required fields, formats)
// and yaml, installed in the directory given first (tests/deploy/manifests.sh
// installs them there):
//   node k8s-validate.mjs NPM_DIR FILE...
// Every document of every FILE must be an object of a known apiVersion and
// kind and pass its model's validation. Prints "ok" or "FAIL" and why, one
// line per document, then a count; exits 0 when every document passed, 1
// when any failed, 2 on a usage error. Not caught: fields the API does not
// know (the models ignore them); manifests.sh checks the fields forktrial's
// manifests rely on by other means.
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, ...files] = process.argv.slice(2);
if (!npmDir || files.length === 0) {
  console.error("usage: node k8s-validate.mjs NPM_DIR FILE...");
  process.exit(2);
}
const require = createRequire(join(npmDir, "package.json"));
const YAML = require("yaml");

// The model class of apiVersion/kind, or null when the package has none.
// The package exports its models to `import` only, as
// kubernetes-models/GROUP/VERSION/KIND (the core group: VERSION/KIND), so
// the file is found by that layout.
const models = join(npmDir, "node_modules", "kubernetes-models");
async function modelOf(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
  if (!/^[A-Za-z0-9.]*$/.test(`${group ?? ""}${version}${kind}`)) return null;
  const path = join(models, ...(group ? [group, version] : [version]), `${kind}.js`);
  if (!existsSync(path)) return null;
  return (await import(pathToFileURL(path).href))[kind] ?? null;
}

let passed = 0;
let failed = 0;
const fail = (where, why) => {
  failed++;
  console.log(`FAIL ${where}: ${why}`);
};

for (const file of files) {
  const docs = YAML.parseAllDocuments(readFileSync(file, "utf8"));
  for (const [index, doc] of docs.entries()) {
    let where = `${file} #${index + 1}`;
    if (doc.errors.length > 0) {
      fail(where, `not YAML: ${doc.errors[0].message}`);
      continue;
    }
    const object = doc.toJS();
    if (object === null || object === undefined) continue; // an empty document
    if (typeof object !== "object" || Array.isArray(object)) {
      fail(where, "not an object");
      continue;
    }
    const { apiVersion, kind } = object;
    where += ` ${kind}/${object.metadata?.name}`;
    if (typeof apiVersion !== "string" || typeof kind !== "string") {
      fail(where, "no apiVersion or kind");
      continue;
    }
    const Model = await modelOf(apiVersion, kind);
    if (!Model) {
      fail(where, `no such kind in the API: ${apiVersion} ${kind}`);
      continue;
    }
    try {
      new Model(object).validate();
      passed++;
      console.log(`ok   ${where}`);
    } catch (error) {
      fail(where, error.message.replace(/\s+/g, " "));
    }
  }
}
console.log(`k8s-validate: ${passed} valid, ${failed} invalid`);
process.exit(failed > 0 ? 1 : 0);
