"""Every environment variable tfaot-dist, its scripts and its tests read: name -> what it means.

Only a list: each variable is read where it is used (limits.py, util/download.py, cache.py, ...).
The documentation's reference page is generated from it (docs/hooks/reference.py), and
tests/test_docs.py checks that every TFAOT_DIST_* name in tfaot_dist/, scripts/ and
tests/conftest.py is listed here, and every name listed is used somewhere.
"""

from __future__ import annotations

# What users set.
VARIABLES: dict[str, str] = {
    "TFAOT_DIST_CACHE": "the cache directory (default $XDG_CACHE_HOME/tfaot-dist, else ~/.cache/tfaot-dist)",
    "TFAOT_DIST_CHANNEL": "the channel `setup` reads when no --channel is given",
    "TFAOT_DIST_OCI_TOKEN": "token or password for OCI channels; sent to the channel's own registry only, "
    "never printed or written",
    "TFAOT_DIST_OCI_USERNAME": "user name sent with TFAOT_DIST_OCI_TOKEN (default tfaot-dist)",
    "TFAOT_DIST_OCI_REGISTRY": "HOST[:PORT] the OCI token is bound to; any other registry is asked anonymously",
    "TFAOT_DIST_HTTP_TIMEOUT": "seconds for connecting and for each read of a request (default 30)",
    "TFAOT_DIST_HTTP_DEADLINE": "seconds for a whole request, all attempts and body reads included (default 600)",
    "TFAOT_DIST_HTTP_RETRIES": "attempts of a request that fails to connect, is cut short or answers 5xx "
    "(default 3)",
    "TFAOT_DIST_FORK_WORKERS": "0: each check or compile starts a TensorFlow worker of its own instead of "
    "forking it from a server that imported TensorFlow once per command and toolchain (default 1)",
    "TFAOT_DIST_SIGNING_KEY": "the text (PEM) of the private key that signs a channel, for CI secrets; "
    "used by publish, yank and trust when --sign is not given",
    "TFAOT_DIST_HTTP_BACKOFF": "seconds to wait after the first failed attempt, doubled after each "
    "(default 0.5)",
    "TFAOT_DIST_MAX_BATCH_SIZES": "batch sizes one model may declare (default 64)",
    "TFAOT_DIST_MAX_ROW_ELEMENTS": "elements of one input per row (default 2^24)",
    "TFAOT_DIST_MAX_BATCH_BYTES": "bytes of all inputs at the largest batch size compiled or verified "
    "(default 1 GiB)",
    "TFAOT_CPU_LEVEL": "the x86-64 level a package's model code and the runtime's kernels run "
    "(x86-64, x86-64-v2, x86-64-v3, x86-64-v4; unset or empty: the best this CPU runs)",
    "TFAOT_DIST_CMSSW_INTERFACE": "a C++ macro, not a variable: 1 builds model.h for CMSSW's tfaot::Model, "
    "0 for tfaot-dist's own (default: 1 when CMSSW's Wrapper.h is on the include path)",
}

# What the scripts, the tests and the release workflow read.
DEVELOPER_VARIABLES: dict[str, str] = {
    "TFAOT_DIST_FAST": "1: the fast tier runs (set by scripts/test --fast); a test that uses a toolchain "
    "fails there",
    "TFAOT_DIST_TEST_WORKERS": "pytest-xdist workers of scripts/test's tiers (default: one per core, the "
    "fast tier one more; 1 for none)",
    "TFAOT_DIST_OTHER_PYTHONS": "0: scripts/test leaves the other Pythons out (a CI that runs each as a job)",
    "TFAOT_DIST_PREWARM": "0: scripts/test makes nothing ahead of the toolchain tier while the fast tiers run "
    "(tests/prewarm.py, the other Pythons' venvs)",
    "TFAOT_DIST_TOOLS": "where scripts/install-actionlint and scripts/install-uv put actionlint and uv "
    "(default $TFAOT_DIST_CACHE/tools)",
    "TFAOT_DIST_TEST_MODELS": "models in the registry of the distribution tests (default 6)",
    "TFAOT_DIST_TEST_ALL_PARTS": "1: tests/test_runtime_parts.py builds every runtime part and compares their "
    "symbols with tests/golden/runtime-part-symbols.json (default: recorded symbols where they match)",
    "TFAOT_DIST_TEST_TIMEOUT": "seconds a test may take before it fails, named (default 1800; 0 for no limit)",
    "TFAOT_DIST_KILL_TRIALS": "trials per command of the soak test's random kills (default 4)",
    "TFAOT_DIST_KILL_SEED": "seed of the soak test's random kills (default 2026)",
    "TFAOT_DIST_CRASH_AT": "the rename at which a command dies as kill -9 would (the crash tests)",
    "TFAOT_DIST_JOBS": "models scripts/release-shard builds at a time (default 2)",
}
