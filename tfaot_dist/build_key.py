"""The build key of a registry entry: a digest of everything that changes a package's bytes, computed
without the network, TensorFlow or the builder (`show` prints it; `build` keys CACHE/builds/ by it and
writes it into each model manifest; the specs check a dist's packages against it).

Its parts are part of every cached package's identity: a change to any of them (a new part, another
digest of the same thing) rebuilds everything.
"""

from __future__ import annotations

import json
from pathlib import Path

from tfaot_dist import __version__, assembly
from tfaot_dist import package as pkg
from tfaot_dist.cxx import runtime_package, weight_sharing
from tfaot_dist.perf import ort_engine
from tfaot_dist.registry import Defaults, ModelEntry
from tfaot_dist.toolchain import worker_digest
from tfaot_dist.util.fs import sha256_bytes, sha256_file
from tfaot_dist.util.render import templates_digest


def build_key(entry: ModelEntry, defaults: Defaults) -> str:
    parts = {
        "entry": entry.as_dict(),
        "defaults": defaults.as_dict(),
        "tool": __version__,
        "templates": templates_digest(assembly.TEMPLATES),
        "layout": pkg.LAYOUT_VERSION,
        "worker": worker_digest(),
        # An ONNX source's package is the converter's output, verified in the ONNX Runtime environment.
        "onnx_converter": ort_engine.converter_digest(),
        "constants": sha256_file(Path(weight_sharing.__file__)),  # rewrites objects and headers
        "runtime_package": runtime_package.packaging_digest(),  # the version "requires" names
    }
    return sha256_bytes(json.dumps(parts, sort_keys=True).encode())
