// The cache's trust rules (tfaot_dist/cache.py: trusted_root and listing_digest) for code the scripts
// run from it: a cache that another user could write to is refused by the tool, so nothing in it is
// run either.
//   checkRoot(ROOT)       ROOT (a link to it is fine) is a directory of ours that group and others cannot write
//   checkPath(ROOT, DIR)  each existing directory from ROOT down to DIR: the same, and no link
//   checkTree(DIR)        DIR and everything below it: ours, no group or other write (links aside), and
//                         every link resolves inside DIR
// Each throws an Error whose message is one line naming the path.
// As a command: node scripts/actionlint/trust.mjs ROOT DIR   (exit 1 with that line: scripts/install-actionlint)
import { lstatSync, readdirSync, realpathSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const advice = "(chmod go-w it, or use another TFAOT_DIST_CACHE or TFAOT_DIST_TOOLS)";

function owned(path, st, what) {
  const uid = process.geteuid();
  if (st.uid !== uid) {
    throw new Error(
      `${path}: ${what} belongs to uid ${st.uid}, not to you (uid ${uid}); refusing to run code from it`,
    );
  }
  if (!st.isSymbolicLink() && (st.mode & 0o022) !== 0) {
    const mode = (st.mode & 0o7777).toString(8);
    throw new Error(`${path}: ${what} is writable by group or others (mode ${mode}); refusing to run code from it ${advice}`);
  }
}

export function checkRoot(root) {
  const st = statSync(root, { throwIfNoEntry: false });
  if (!st || !st.isDirectory()) {
    throw new Error(`${root}: not a directory`);
  }
  owned(root, st, "the cache");
}

export function checkPath(root, dir) {
  const rel = relative(resolve(root), resolve(dir));
  if (rel.startsWith("..")) {
    throw new Error(`${dir}: not inside ${root}`);
  }
  let path = resolve(root);
  for (const part of rel ? rel.split(sep) : []) {
    path = join(path, part);
    const st = lstatSync(path, { throwIfNoEntry: false });
    if (!st) {
      return;
    }
    if (!st.isDirectory()) {
      throw new Error(`${path}: not a directory (a link or a file); refusing to run code from it`);
    }
    owned(path, st, "the tools directory");
  }
}

export function checkTree(dir) {
  const top = realpathSync(dir);
  const walk = (path) => {
    const st = lstatSync(path);
    owned(path, st, "a file of the tool");
    if (st.isSymbolicLink()) {
      const target = realpathSync(path);
      if (target !== top && !target.startsWith(top + sep)) {
        throw new Error(`${path}: a link out of ${dir} (to ${target}); refusing to run code from it`);
      }
    } else if (st.isDirectory()) {
      for (const name of readdirSync(path).sort()) {
        walk(join(path, name));
      }
    }
  };
  walk(dir);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [root, dir] = process.argv.slice(2);
  try {
    checkRoot(root);
    checkPath(root, dir);
    if (statSync(dir, { throwIfNoEntry: false })) {
      checkTree(dir);
    }
  } catch (error) {
    console.error(`install-actionlint: ${error.message}`);
    process.exit(1);
  }
}
