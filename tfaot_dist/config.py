"""The AOT config (aot_config.yaml), exactly the schema of the CMS documentation.

    model:        name, version, saved_model (./saved_model), serving_key
                  (serving_default), author, description; or instead of
                  saved_model an ONNX file: onnx (PATH) and dims ({SYMBOL: VALUE},
                  ours: the symbolic dimensions other than the batch), converted
                  into a SavedModel before anything else (onnx_source.py)
    compilation:  batch_sizes (required), namespace (tfaot_model),
                  tf_xla_flags, xla_flags, target_triple, target_cpu,
                  cpu_levels, activation_formulas (ours, see below)
    verification: tolerance (ours: DEFAULT_TOLERANCE, see below)

CPU levels: by default a package carries code for several x86-64 psABI levels
(`cpu_levels`, registry default ["x86-64", "x86-64-v3", "x86-64-v4"]) and its
model.h picks the best one the CPU runs. A non-empty `target_cpu` (here, in the
registry overrides or defaults) instead makes a single-target package exactly
as before levels existed: compiled for that CPU only, no dispatch. Giving both
in one file is refused.

Activation formulas: "tensorflow" (the default) compiles Selu and Elu as
TensorFlow's CPU kernels compute them, exp(x) - 1 for x < 0; "xla" keeps XLA's
translation, expm1, which is slower (a third of a SELU model's time at large
batch sizes) and differs more from TensorFlow's outputs.

Verification tolerance: how far a compiled float output may be from TensorFlow's,
absolute or relative (harness.compare). The model's author sets it; registry
overrides cannot (it is a property of the model, not of a build's settings).

Read with upstream's meaning (cms-tfaot's loader): a null or empty value means
the default, model.version is any non-empty string (the model's own version;
packages get a PEP 440 one), and unknown keys are noted as warnings, not
refused. JSON files are accepted too (JSON is YAML). Every value is validated
here, so later stages can place them in C++, XML and specs.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from tfaot_dist import limits, names
from tfaot_dist.errors import InvalidInput
from tfaot_dist.limits import MAX_TOLERANCE
from tfaot_dist.util.textsafe import shown
from tfaot_dist.util.yamlio import Fields, load_mapping

if TYPE_CHECKING:  # annotations only: reading a config needs no gitpython (sources.py imports it)
    from tfaot_dist.sources import ResolvedSource

# Compilation settings by field name, validated (parse_compilation): a registry entry's overrides.
Overrides = dict[str, Any]

DEFAULT_TARGET_TRIPLE = "x86_64-pc-linux"
MAX_BATCH_SIZE = 65536
DEFAULT_TOLERANCE = 1e-5  # harness.TOLERANCE


@dataclass(frozen=True)
class Compilation:
    batch_sizes: tuple[int, ...]
    namespace: str = "tfaot_model"
    tf_xla_flags: tuple[str, ...] = ()
    xla_flags: tuple[str, ...] = ()
    # None: not set here; the registry's default (or DEFAULT_TARGET_TRIPLE, generic CPU) applies.
    target_triple: str | None = None
    target_cpu: str | None = None
    # None: not set here (the registry's default applies); () once resolved for a single-target package.
    cpu_levels: tuple[str, ...] | None = None
    # Default batch rules baked into model.h, e.g. ("5:4,1",); written by `tfaot-dist tune`.
    batch_rules: tuple[str, ...] = ()
    activation_formulas: str = "tensorflow"  # or "xla" (see the module's docstring)


@dataclass(frozen=True)
class AotConfig:
    path: Path
    name: str  # C++ class name of the model
    version: str  # PEP 440, what `compile` names the package by default (see package_version)
    saved_model: Path  # absolute
    serving_key: str = "serving_default"
    author: str = ""
    description: str = ""
    compilation: Compilation = field(default_factory=lambda: Compilation(batch_sizes=(1,)))
    model_version: str = ""  # model.version as written (any text); version is its PEP 440 form
    tolerance: float = DEFAULT_TOLERANCE  # verification.tolerance
    warnings: tuple[str, ...] = ()  # e.g. unknown keys: upstream ignores them, we say so
    # An ONNX file (a PyTorch export) instead of saved_model, converted into a SavedModel first (until then
    # saved_model is this file: onnx_source.converted() replaces it and fills onnx_record).
    onnx: Path | None = None
    # Values of the ONNX file's symbolic dimensions other than the batch, e.g. {n_part: 64}.
    dims: tuple[tuple[str, int], ...] = ()
    onnx_record: tuple[tuple[str, str], ...] = ()  # for the manifest: sha256, opset, producer, deviation

    def with_overrides(self, overrides: Overrides) -> AotConfig:
        """Apply validated registry overrides of compilation settings."""
        return replace(self, compilation=replace(self.compilation, **overrides)) if overrides else self

    def with_target_defaults(self, triple: str, cpu: str, levels: tuple[str, ...]) -> AotConfig:
        """Fill the target settings this config leaves open.

        A non-empty target_cpu wins over levels: a single-target package (cpu_levels ()).
        """
        comp = self.compilation
        target_cpu = comp.target_cpu if comp.target_cpu is not None else cpu
        cpu_levels = comp.cpu_levels if comp.cpu_levels is not None else levels
        return replace(
            self,
            compilation=replace(
                comp,
                target_triple=comp.target_triple if comp.target_triple is not None else triple,
                target_cpu=target_cpu,
                cpu_levels=() if target_cpu else cpu_levels,
            ),
        )


def batch_sizes(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidInput(f"{where}: expected a non-empty list of positive integers, got {shown(value)}")
    if len(value) > (most := limits.max_batch_sizes()):
        raise InvalidInput(
            f"{where}: {len(value)} batch sizes, at most {most} ({limits.BATCH_SIZES_ENV} raises the bound)"
        )
    for bs in value:
        if isinstance(bs, bool) or not isinstance(bs, int):
            raise InvalidInput(f"{where}: batch size {bs!r} is not an integer")
        if bs <= 0:
            raise InvalidInput(f"{where}: batch size {bs} is not positive")
        if bs > MAX_BATCH_SIZE:
            raise InvalidInput(f"{where}: batch size {bs} is larger than {MAX_BATCH_SIZE}")
    duplicates = sorted(bs for bs, n in Counter(value).items() if n > 1)
    if duplicates:
        raise InvalidInput(f"{where}: duplicate batch sizes {duplicates}")
    return tuple(sorted(value))


def batch_rules(value: object, where: str) -> tuple[str, ...]:
    """Rule strings "TARGET:SIZE,SIZE,...": the sizes cover the target, only the last one padded.

    Whether the sizes are compiled ones is checked where both are known (the
    model's constructor refuses a package whose default rule is not).
    """
    if not isinstance(value, list):
        raise InvalidInput(f"{where}: expected a list of batch rules like '5:4,1', got {value!r}")
    targets = set()
    for rule in value:
        m = names.BATCH_RULE.fullmatch(rule) if isinstance(rule, str) else None
        if not m:
            raise InvalidInput(
                f"{where}: invalid batch rule {rule!r} (expected 'TARGET:SIZE[,SIZE...]', e.g. '5:4,1')"
            )
        target, sizes = int(m.group(1)), [int(x) for x in m.group(2).split(",")]
        if not 0 <= sum(sizes) - target < sizes[-1]:
            raise InvalidInput(
                f"{where}: batch rule {rule!r}: the sizes must cover {target} with padding only "
                "in the last evaluation"
            )
        if target in targets:
            raise InvalidInput(f"{where}: two batch rules for target {target}")
        targets.add(target)
    return tuple(value)


def tolerance(value: object, where: str) -> float:
    """A verification tolerance: a number above 0 and at most MAX_TOLERANCE.

    A string in float notation counts as its number: YAML 1.1 reads 1e-4 (no dot) as a string.
    """
    number: object = value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value)
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not 0 < number <= MAX_TOLERANCE:
        raise InvalidInput(
            f"{where}: expected a number above 0 and at most {MAX_TOLERANCE:g}, got {shown(value)}"
        )
    return float(number)


def flag_list(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise InvalidInput(f"{where}: expected a list of flags, got {value!r}")
    return tuple(names.xla_flag(v, where) for v in value)


def package_version(model_version: str) -> str:
    """A PEP 440 version for model.version: itself when it is one (normalized), else 0+LABEL.

    "1.0.0" -> "1.0.0", "v2" -> "2", "2024-05_final" -> "0+2024.5.final" (the alphanumeric runs
    as a local label, so versions of one model still sort as their text suggests).
    """
    try:
        return str(Version(model_version))
    except InvalidVersion:
        local = ".".join(re.findall(r"[A-Za-z0-9]+", model_version)).lower()[:100]
        return str(Version(f"0+{local}")) if local else "0"


def _drop_empty(f: Fields, keys: tuple[str, ...]) -> None:
    """Upstream's meaning of null or empty: use the default (the key as if absent)."""
    for key in keys:
        if key in f.data and (f.data[key] is None or f.data[key] == "" or f.data[key] == []):
            del f.data[key]


COMPILATION_KEYS = (
    "batch_sizes",
    "namespace",
    "target_triple",
    "target_cpu",
    "cpu_levels",
    "tf_xla_flags",
    "xla_flags",
    "batch_rules",
    "activation_formulas",
)


def parse_compilation(
    data: object, file: Path | str, prefix: str, partial: bool, ignored: list[str] | None = None
) -> Overrides:
    """Validated compilation settings as a dict of Compilation fields.

    partial=True parses registry overrides, where every field is optional. ignored: unknown keys
    the caller took out already (a missing field's error names them).
    """
    f = Fields(data, file, prefix, known=COMPILATION_KEYS)
    f.ignored = list(ignored or [])
    if not partial:  # an upstream AOT config: null/empty means the default
        _drop_empty(
            f,
            (
                "namespace",
                "target_triple",
                "target_cpu",
                "cpu_levels",
                "tf_xla_flags",
                "xla_flags",
                "batch_rules",
                "activation_formulas",
            ),
        )
    out: Overrides = {}
    if "batch_sizes" in f.data or not partial:
        out["batch_sizes"] = batch_sizes(f.take("batch_sizes", list, required=True), f.at("batch_sizes"))
    checks: dict[str, tuple[type, Callable[[Any, str], object]]] = {
        "namespace": (str, names.cpp_identifier),
        "target_triple": (str, names.target_triple),
        "target_cpu": (str, names.target_cpu),
        "cpu_levels": (list, names.cpu_levels),
        "tf_xla_flags": (list, flag_list),
        "xla_flags": (list, flag_list),
        "batch_rules": (list, batch_rules),
        "activation_formulas": (str, names.activation_formulas),
    }
    for key, (kind, check) in checks.items():
        if key in f.data:
            out[key] = check(f.take(key, kind), f.at(key))
    f.done()
    if out.get("target_cpu") and "cpu_levels" in out:
        raise InvalidInput(
            f"{f.at('cpu_levels')}: give target_cpu (one CPU) or cpu_levels (several), not both"
        )
    return out


def load_aot_config(path: Path, label: str | None = None, within: Path | None = None) -> AotConfig:
    """Load and validate; errors name the file as label (e.g. 'URL@commit: dir/aot_config.yaml').

    within: the source tree that model.saved_model must stay inside.
    """
    data = load_mapping(path, label)
    where = label or path
    top = Fields(data, where)
    unknown = top.ignore_unknown(("model", "compilation", "verification"))
    model = Fields(top.take("model", dict, required=True), where, "model")
    unknown += model.ignore_unknown(
        ("name", "version", "saved_model", "onnx", "dims", "serving_key", "author", "description")
    )
    _drop_empty(model, ("saved_model", "onnx", "dims", "serving_key", "author", "description"))
    comp = Fields(top.take("compilation", dict, required=True), where, "compilation")
    unknown += comp.ignore_unknown(COMPILATION_KEYS)
    compilation = parse_compilation(comp.data, where, "compilation", False, ignored=comp.ignored)
    _drop_empty(top, ("verification",))
    check = Fields(top.take("verification", dict, {}), where, "verification")
    unknown += check.ignore_unknown(("tolerance",))
    _drop_empty(check, ("tolerance",))
    tolerance_ = tolerance(check.data.pop("tolerance", DEFAULT_TOLERANCE), check.at("tolerance"))
    check.done()
    top.done()

    name = names.cpp_identifier(model.take("name", str, required=True), model.at("name"))
    model_version = model.take("version", (str, int), required=True)
    model_version = names.free_text(str(model_version).strip(), model.at("version"))
    if not model_version:
        raise InvalidInput(f"{model.at('version')}: expected a non-empty version")
    if "onnx" in model.data and "saved_model" in model.data:
        raise InvalidInput(f"{model.at('onnx')}: give saved_model or onnx, not both")
    onnx_rel = model.take("onnx", str, "")
    dims = _dims(model.take("dims", dict, {}), model.at("dims"))
    saved_model_rel = model.take("saved_model", str, "./saved_model")
    serving_key = names.serving_key(
        model.take("serving_key", str, "serving_default"), model.at("serving_key")
    )
    author = names.free_text(model.take("author", str, ""), model.at("author"))
    description = names.free_text(model.take("description", str, ""), model.at("description"))
    model.done()

    onnx = _onnx_file(path, onnx_rel, model.at("onnx"), within) if onnx_rel else None
    if dims and onnx is None:
        raise InvalidInput(f"{model.at('dims')}: dims name symbolic dimensions of an ONNX file (model.onnx)")
    saved_model = onnx or _saved_model_dir(path, saved_model_rel, model.at("saved_model"), within)
    return AotConfig(
        path=path.resolve(),
        name=name,
        version=package_version(model_version),
        saved_model=saved_model,
        serving_key=serving_key,
        author=author,
        description=description,
        compilation=Compilation(**compilation),
        model_version=model_version,
        tolerance=tolerance_,
        warnings=(f"{where}: unknown keys ignored: {', '.join(unknown)}",) if unknown else (),
        onnx=onnx,
        dims=dims,
    )


def _saved_model_dir(path: Path, saved_model_rel: str, where: str, within: Path | None) -> Path:
    saved_model = (path.parent / saved_model_rel).resolve()
    if within is not None and not saved_model.is_relative_to(within.resolve()):
        raise InvalidInput(f"{where}: {saved_model_rel!r} points outside the source tree")
    if not saved_model.is_dir():
        raise InvalidInput(f"{where}: SavedModel directory {saved_model_rel!r} not found")
    if not (saved_model / "saved_model.pb").is_file():
        raise InvalidInput(f"{where}: {saved_model_rel!r} has no saved_model.pb")
    return saved_model


def _onnx_file(path: Path, onnx_rel: str, where: str, within: Path | None) -> Path:
    onnx = (path.parent / onnx_rel).resolve()
    if within is not None and not onnx.is_relative_to(within.resolve()):
        raise InvalidInput(f"{where}: {onnx_rel!r} points outside the source tree")
    if not onnx.is_file():
        raise InvalidInput(f"{where}: ONNX file {onnx_rel!r} not found")
    return onnx


def _dims(value: dict[Any, Any], where: str) -> tuple[tuple[str, int], ...]:
    """model.dims: {SYMBOL: positive integer}, sorted by symbol."""
    out = []
    for symbol, size in value.items():
        if not isinstance(symbol, str) or not symbol or len(symbol) > 200:
            raise InvalidInput(f"{where}: expected symbolic dimension names, got {shown(symbol)}")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= MAX_BATCH_SIZE:
            raise InvalidInput(
                f"{where}.{symbol}: expected an integer from 1 to {MAX_BATCH_SIZE}, got {shown(size)}"
            )
        out.append((symbol, size))
    return tuple(sorted(out))


def load_source_config(src: ResolvedSource, aot_config: str) -> AotConfig:
    """The AOT config at aot_config (relative to a fetched source tree): errors name the source's
    URL and pin, and model.saved_model must stay inside the tree."""
    path = src.root / aot_config
    if not path.is_file():
        raise InvalidInput(f"{src.url}@{src.commit[:12]}: aot config {aot_config!r} not found")
    label = f"{src.url}@{src.commit[:12]}: {aot_config}"
    return load_aot_config(path, label, within=src.root)
