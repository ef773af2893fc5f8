"""The JSON documents tfaot-dist reads from elsewhere, and what each one holds: one table.

    IndexRow      one package of a channel's index.json
    InstalledRow  one package of an area's installed.json (keyed by package name)
    Requirement   one `requires` entry (index rows, installed rows, manifests)
    Manifest      the fields of a package's manifest.json that publish, setup, the catalogue and specs read
    ModelManifest a model package's whole manifest.json, as the builder writes it once
    RuntimeManifest  the runtime package's whole manifest.json, as runtime_package writes it
    CompileRequest / CompileAnswer   the TensorFlow worker's "compile" request and its answer
    CheckRequest / CheckAnswer       its "check" request (signature and XLA op support) and answer

Each is a frozen dataclass; its fields and their types are the schema. from_json()
checks every field's type (and its pattern, where a field has one) before anything
uses it, and names the field and a short quote of the value when it refuses;
to_json() gives back the JSON object (fields at their default and marked
`omit_default` are left out, as the writers always did). load_json() reads bytes
with bounds on size, nesting depth and integer length, so no document can exhaust
memory or the stack.
"""

# No `from __future__ import annotations` here, and Optional/Union rather than X | Y: the fields'
# types are read at run time (typing.get_type_hints), and Python 3.9 cannot evaluate X | Y.
import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal, NoReturn, Optional, TypeVar, Union

from tfaot_dist import names
from tfaot_dist.errors import InvalidInput
from tfaot_dist.limits import MAX_TOLERANCE
from tfaot_dist.pins import check_sha256
from tfaot_dist.util.textsafe import shown

MAX_DEPTH = 64
MAX_INT_DIGITS = 64
MAX_JSON = 64 << 20
RUNTIME = names.RUNTIME_PACKAGE
RUNTIME_PART = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a runtime source's file stem

Kind = Literal["model", "runtime"]  # what a package is (index rows, installed rows, manifests)
JsonObject = dict[str, Any]  # an object read as it is: whoever uses a field checks its type
Check = Callable[[Any, str], Any]  # check(value, where) -> value, or InvalidInput naming where


# ---------------------------------------------------------------- bounded loading


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def load_json(data: Union[bytes, str], label: str, max_bytes: int = MAX_JSON) -> Any:
    """Parse one JSON document: at most max_bytes, MAX_DEPTH levels, integers of MAX_INT_DIGITS."""
    if len(data) > max_bytes:
        raise InvalidInput(f"{label}: larger than {max_bytes} bytes")
    try:
        doc = json.loads(data, parse_int=_bounded_int, parse_constant=_no_constant)
    except RecursionError:
        raise InvalidInput(f"{label}: nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{label}: not valid JSON (truncated?): {shown(str(exc), quote=False)}") from None
    if _depth(doc) > MAX_DEPTH:
        raise InvalidInput(f"{label}: nested deeper than {MAX_DEPTH} levels")
    return doc


def _depth(doc: Any) -> int:
    deepest, todo = 0, [(doc, 1)]
    while todo:
        value, level = todo.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                todo += [(v, level + 1) for v in (value.values() if isinstance(value, dict) else value)]
    return deepest


# ---------------------------------------------------------------- field checks


def _package_name(value: str, where: str) -> str:
    if not names.PACKAGE_NAME.fullmatch(value):
        raise InvalidInput(
            f"{where}: invalid package name {shown(value)} (expected tfaot-model-NAME or {RUNTIME})"
        )
    return value


def _rel_path(value: str, where: str) -> str:
    """A relative path of plain segments (versions may hold "+"): no "..", no leading "/"."""
    if not names.PACKAGE_PATH.fullmatch(value) or ".." in value.split("/"):
        raise InvalidInput(f"{where}: invalid path {shown(value)}")
    return value


def _one_of(*allowed: str) -> Callable[[str, str], str]:
    def check(value: str, where: str) -> str:
        if value not in allowed:
            raise InvalidInput(f"{where}: expected one of {', '.join(allowed)}, got {shown(value)}")
        return value

    return check


def _non_negative(value: int, where: str) -> int:
    if value < 0:
        raise InvalidInput(f"{where}: expected a number >= 0, got {value}")
    return value


def _positive(value: int, where: str) -> int:
    if value <= 0:
        raise InvalidInput(f"{where}: expected a number > 0, got {value}")
    return value


def _tolerance(value: float, where: str) -> float:
    if not 0 < value <= MAX_TOLERANCE:
        raise InvalidInput(f"{where}: expected a number above 0 and at most {MAX_TOLERANCE:g}, got {value}")
    return value


def _tool_file(value: str, where: str) -> str:
    if not names.TOOL_FILE.fullmatch(value):
        raise InvalidInput(f"{where}: unexpected tool file {shown(value)} (scram.d/NAME.xml)")
    return value


def _signature(value: JsonObject, where: str) -> JsonObject:
    for key in ("inputs", "outputs"):
        tensors = value.get(key, [])
        if not isinstance(tensors, list):
            raise InvalidInput(f"{where}.{key}: expected a list, got {shown(tensors)}")
        for i, tensor in enumerate(tensors):  # what the catalogue and the C++ call are made from
            Tensor.from_json(tensor, f"{where}.{key}[{i}]")
    return value


MAX_YANK_REASON = 500


def yank_reason(value: str, where: str) -> str:
    names.free_text(value, where)
    if not value.strip() or len(value) > MAX_YANK_REASON:
        raise InvalidInput(
            f"{where}: expected a reason of 1 to {MAX_YANK_REASON} characters, got {shown(value)}"
        )
    return value


def check(fn: Check, **extra: Any) -> dict[str, Any]:
    """Field metadata: fn(value, where) validates (and returns) the already type-checked value."""
    return {"check": fn, **extra}


# ---------------------------------------------------------------- the schema machinery


DocumentT = TypeVar("DocumentT", bound="Document")


class Document:
    """Base of the documents below: from_json/to_json driven by the dataclass fields."""

    @classmethod
    def from_json(cls: type[DocumentT], value: Any, where: str) -> DocumentT:
        if not isinstance(value, dict):
            raise InvalidInput(f"{where}: expected an object, got {shown(value)}")
        kwargs: dict[str, Any] = {}
        for name, required, convert, checked in _plan(typing.cast(Any, cls)):
            if name not in value:
                if required:
                    raise InvalidInput(f"{where}.{name}: required field is missing")
                continue
            at = f"{where}.{name}"
            converted = convert(value[name], at)
            if checked is not None and converted is not None:
                converted = checked(converted, at)
            kwargs[name] = converted
        return cls(**kwargs)

    def to_json(self) -> JsonObject:
        out = {}
        for f in _fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("omit_default") and value == _default(f):
                continue
            out[f.name] = _to_json(value)
        return out


def _default(f: "dataclasses.Field[Any]") -> Any:
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def _fields(doc: Any) -> "tuple[dataclasses.Field[Any], ...]":
    return dataclasses.fields(doc)  # every subclass of Document is a dataclass


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _plan(cls: Any) -> tuple[tuple[str, bool, Check, Optional[Check]], ...]:
    """(name, required, converter, check) of each field of a document class, worked out once."""
    hints = _hints(cls)
    return tuple(
        (
            f.name,
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            _converter(hints[f.name]),
            f.metadata.get("check"),
        )
        for f in _fields(cls)
    )


def _convert(kind: Any, value: Any, where: str) -> Any:
    return _converter(kind)(value, where)


# typing.Union[X, Y] and Optional[X]; X | Y (types.UnionType) from 3.10 on.
_UNIONS = (typing.Union, getattr(types, "UnionType", typing.Union))


@cache
def _converter(kind: Any) -> Check:
    """A function (value, where) -> value of type kind, refusing anything else (InvalidInput naming where).
    Worked out once per type: an index of 20,000 rows is read field by field."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in _UNIONS:
        inner = _converter(next(a for a in args if a is not type(None)))
        optional = type(None) in args
        return lambda value, where: None if value is None and optional else inner(value, where)
    if origin is Literal:
        return _one_of(*args)
    if isinstance(kind, type) and issubclass(kind, Document):
        return kind.from_json
    if origin is tuple:
        element = _converter(args[0])

        def to_tuple(value: Any, where: str) -> tuple[Any, ...]:
            if not isinstance(value, list):
                raise InvalidInput(f"{where}: expected a list, got {shown(value)}")
            return tuple(element(v, f"{where}[{i}]") for i, v in enumerate(value))

        return to_tuple
    if origin is dict:
        item = _converter(args[1])

        def to_dict(value: Any, where: str) -> dict[str, Any]:
            if not isinstance(value, dict):
                raise InvalidInput(f"{where}: expected an object, got {shown(value)}")
            return {k: item(v, f"{where}.{k}") for k, v in value.items()}

        return to_dict

    def plain(value: Any, where: str) -> Any:
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidInput(f"{where}: expected an integer, got {shown(value)}")
        if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InvalidInput(f"{where}: expected a number, got {shown(value)}")
        if kind in (str, bool) and not isinstance(value, kind):
            raise InvalidInput(
                f"{where}: expected {'a string' if kind is str else 'true or false'}, got {shown(value)}"
            )
        return value

    return plain


def _to_json(value: Any) -> Any:
    if isinstance(value, Document):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------- the documents


def _required_name(value: str, where: str) -> str:
    """A package of ours, or the release's runtime a package was built against (cmsBuild flavour)."""
    return value if value == names.RELEASE_RUNTIME_PACKAGE else _package_name(value, where)


@dataclass(frozen=True)
class Requirement(Document):
    """A package needs this exact package version (a model: the runtime it was verified with; the
    release's tensorflow-xla-runtime at its TensorFlow version for a package built against it)."""

    name: str = field(metadata=check(_required_name))
    version: str = field(metadata=check(names.version))


@dataclass(frozen=True)
class IndexRow(Document):
    """One line of a channel's index.json."""

    name: str = field(metadata=check(_package_name))  # tfaot-model-NAME or tfaot-xla-runtime
    version: str = field(metadata=check(names.version))
    kind: Kind
    archive: str = field(metadata=check(_rel_path))  # relative to the channel
    size: int = field(metadata=check(_non_negative))
    sha256: str = field(metadata=check(check_sha256))
    manifest: str = field(metadata=check(_rel_path))  # relative to the channel
    manifest_sha256: str = field(metadata=check(check_sha256))
    requires: tuple[Requirement, ...]
    tensorflow_version: str
    batch_sizes: tuple[int, ...]  # () for the runtime
    signature: Optional[JsonObject] = field(
        metadata=check(_signature)
    )  # inputs and outputs; None for the runtime
    # Yanked (PEP 592's sense): the reason. setup takes the version only when it is pinned exactly.
    yanked: Optional[str] = field(default=None, metadata=check(yank_reason, omit_default=True))
    # Raised by each change of a listed row (a yank, its undoing): OCI readers merge index parts by it.
    revision: int = field(default=0, metadata=check(_non_negative, omit_default=True))

    def __post_init__(self) -> None:
        if (self.kind == "runtime") != (self.name == RUNTIME):
            raise InvalidInput(f"kind: {self.kind!r} does not fit {self.name}")
        for n in self.batch_sizes:
            _positive(n, "batch_sizes")

    @classmethod
    def from_json(cls: type[DocumentT], value: Any, where: str) -> DocumentT:
        try:
            return super().from_json(value, where)
        except InvalidInput as exc:
            if str(exc).startswith(("kind:", "batch_sizes:")):
                raise InvalidInput(f"{where}.{exc}") from None
            raise

    @property
    def key(self) -> tuple[str, str]:
        return self.name, self.version


@dataclass(frozen=True)
class InstalledRow(Document):
    """One package of an area's installed.json; its name is the key of the row."""

    version: str = field(metadata=check(names.version))
    kind: Kind
    sha256: str = field(metadata=check(check_sha256))
    path: str = field(metadata=check(_rel_path))  # PACKAGE/VERSION, relative to AREA/tfaot
    requires: tuple[Requirement, ...]
    tool_files: tuple[str, ...]
    channel: str
    scram: bool = field(default=False, metadata={"omit_default": True})  # tool files given to scram setup

    @classmethod
    def from_json_named(cls, name: object, value: Any, where: str) -> "InstalledRow":
        """The row of package name: name and row checked, and path is exactly NAME/VERSION."""
        if not isinstance(name, str):
            raise InvalidInput(f"{where}: invalid package name {shown(name)}")
        _package_name(name, where)
        row = cls.from_json(value, where)
        if row.path != f"{name}/{row.version}":
            raise InvalidInput(f"{where}.path: expected {name}/{row.version}, got {shown(row.path)}")
        for i, tool in enumerate(row.tool_files):
            _tool_file(tool, f"{where}.tool_files[{i}]")
            if tool != f"scram.d/{name}.xml":  # a package's tool file has its own name (ownership.py)
                raise InvalidInput(f"{where}.tool_files[{i}]: expected scram.d/{name}.xml, got {shown(tool)}")
        return row


@dataclass(frozen=True)
class FileDigest(Document):
    sha256: str = field(metadata=check(check_sha256))
    size: int = field(metadata=check(_non_negative))


def _file_name(value: str, where: str) -> str:
    """A plain file name (what the worker says it wrote into its output directory)."""
    if not names.FILE_NAME.fullmatch(value):
        raise InvalidInput(f"{where}: invalid file name {shown(value)}")
    return value


def _each(fn: Check) -> Check:
    """A check of every element of a tuple (or every key of an object) with fn."""

    def check_all(values: Any, where: str) -> Any:
        for i, value in enumerate(values):
            fn(
                value,
                f"{where}[{i}]" if isinstance(values, tuple) else f"{where}.{shown(value, quote=False)}",
            )
        return values

    return check_all


def _model_package(value: str, where: str) -> str:
    if not value.startswith("tfaot-model-"):
        raise InvalidInput(f"{where}: {shown(value)} is not a model package (tfaot-model-NAME)")
    return _package_name(value, where)


DTYPES = ("float32", "float64", "int32", "int64", "bool")  # what the worker accepts (worker/tf_worker.py)
OMIT_NONE = {"omit_default": True}  # a field written only when set (default None)


@dataclass(frozen=True)
class Tensor(Document):
    """One input or output of the serving signature; shape without the batch axis."""

    name: str
    dtype: str = field(metadata=check(_one_of(*DTYPES)))
    shape: tuple[int, ...] = field(metadata=check(_each(_non_negative)))


@dataclass(frozen=True)
class Signature(Document):
    """Inputs and outputs in the compiled order (sorted by name); order: the note manifests carry."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    order: Optional[str] = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class ReferenceCase(Document):
    """TensorFlow's inputs and outputs for one batch size, in reference/DIR/{input,output}_I.bin."""

    batch_size: int = field(metadata=check(_positive))
    dir: str = field(metadata=check(_rel_path))


@dataclass(frozen=True)
class Reference(Document):
    dir: str = field(metadata=check(_rel_path))  # relative to the package root
    cases: tuple[ReferenceCase, ...]


@dataclass(frozen=True)
class Deviation(Document):
    max_abs: float
    max_rel: float


def _cpu_level(value: str, where: str) -> str:
    if value not in names.CPU_LEVELS:
        raise InvalidInput(f"{where}: unknown CPU level {shown(value)}")
    return value


@dataclass(frozen=True)
class LevelCheck(Document):
    """One CPU level of a multi-level package: run by the harness here, or why not."""

    verified: bool
    note: str = field(default="", metadata={"omit_default": True})  # e.g. "this CPU lacks avx512bw, ..."


@dataclass(frozen=True)
class Verification(Document):
    """What harness.compare() found: the worst deviation per output over every case, path and level run,
    within tolerance (the model's: its aot config's verification.tolerance, which `verify` uses again)."""

    tolerance: float = field(metadata=check(_tolerance))
    batch_sizes: tuple[int, ...]
    outputs: dict[str, Deviation]
    paths: tuple[str, ...]
    # Multi-level packages: each level of compilation.cpu_levels, verified or not (and why).
    cpu_levels: Optional[dict[str, LevelCheck]] = field(
        default=None, metadata={**OMIT_NONE, "check": _each(_cpu_level)}
    )


@dataclass(frozen=True)
class ConstantsOfSize(Document):
    defined: int
    shared: int
    note: str = field(default="", metadata={"omit_default": True})


@dataclass(frozen=True)
class SharedConstants(Document):
    """constants.Report: the weights' buffers, before and after sharing them across batch sizes."""

    format: int
    buffers: int
    unique_buffers: int
    original_bytes: int
    bytes: int
    per_batch_size: dict[str, ConstantsOfSize]


@dataclass(frozen=True)
class RuntimeOrigin(Document):
    """Where the XLA runtime came from when it is not the one tfaot-dist builds (--runtime DIR).

    kind "release": a release's tensorflow-xla-runtime (cxx/installed_runtime.py), known by its
    TensorFlow version and its library's sha256 (no path); absent for runtimes of ours."""

    origin: str = field(metadata=check(_one_of("installed")))
    key: str
    kind: Optional[str] = field(default=None, metadata={**OMIT_NONE, "check": _one_of("release")})
    tensorflow_version: Optional[str] = field(default=None, metadata=OMIT_NONE)
    library_sha256: Optional[str] = field(default=None, metadata={**OMIT_NONE, "check": check_sha256})


@dataclass(frozen=True)
class ToolchainRecord(Document):
    """The toolchain a model was compiled with, as its manifest records it ("toolchain"): our venv
    (requirements) or an existing Python (environment "existing", its installed TensorFlow).
    toolchain.Toolchain is the environment itself, on this machine."""

    tensorflow_version: str = ""
    requirements: Optional[tuple[str, ...]] = field(default=None, metadata=OMIT_NONE)
    environment: Optional[str] = field(default=None, metadata=OMIT_NONE)
    installed: Optional[tuple[str, ...]] = field(default=None, metadata=OMIT_NONE)
    runtime: Optional[RuntimeOrigin] = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Compilation(Document):
    """config.Compilation as compiled, with the C++ class name."""

    batch_sizes: tuple[int, ...] = ()
    target_triple: Optional[str] = None
    target_cpu: Optional[str] = None
    namespace: str = ""
    class_name: str = ""
    tf_xla_flags: tuple[str, ...] = ()
    xla_flags: tuple[str, ...] = ()
    batch_rules: tuple[str, ...] = field(default=(), metadata={"omit_default": True})  # set by `tune` only
    # The x86-64 levels compiled, lowest first; () for a single-target package (target_cpu alone).
    # The lowest has the classes CLASS_bsN, the others CLASS_bsN_LEVEL (x86_64_v3, ...).
    cpu_levels: tuple[str, ...] = field(
        default=(), metadata={"omit_default": True, "check": _each(_cpu_level)}
    )
    # Every XLA flag tfcompile ran with: ours (small-matrix tiles), then xla_flags, then saved_model_cli's.
    tfcompile_xla_flags: tuple[str, ...] = field(default=(), metadata={"omit_default": True})
    # CPU level -> the LLVM features tfcompile got beside it (no AVX-512 gathers and scatters at x86-64-v4).
    tfcompile_target_features: dict[str, str] = field(default_factory=dict, metadata={"omit_default": True})
    # How Selu and Elu were compiled: "tensorflow" (TensorFlow's CPU formula, exp(x) - 1) or "xla"
    # (XLA's expm1); absent in packages made before the choice existed (they have XLA's).
    activation_formulas: Optional[str] = field(
        default=None, metadata=check(_one_of(*names.ACTIVATION_FORMULAS), omit_default=True)
    )
    # op -> nodes compiled with TensorFlow's formula, in each batch size's graph.
    rewritten_activations: dict[str, int] = field(default_factory=dict, metadata={"omit_default": True})
    # op -> nodes written with other ops that tfcompile writes (Conv3D as Conv2D over depth slices, TF 2.21).
    rewritten_ops: dict[str, int] = field(default_factory=dict, metadata={"omit_default": True})


@dataclass(frozen=True)
class Manifest(Document):
    """The fields of manifest.json that publish, setup and the area's build-system files read, for
    both kinds of package and from any tfaot-dist version (so most fields have defaults); a model
    package's whole manifest, as this version writes it, is a ModelManifest (same nested types)."""

    package: str = field(metadata=check(_package_name))
    version: str = field(metadata=check(names.version))
    files: dict[str, FileDigest]
    kind: Kind = "model"
    requires: tuple[Requirement, ...] = ()
    tensorflow_version: Optional[str] = None  # the runtime's
    toolchain: Optional[ToolchainRecord] = None  # a model's
    compilation: Optional[Compilation] = None
    signature: Optional[JsonObject] = field(default=None, metadata=check(_signature))
    model: Optional[JsonObject] = None  # free text: whoever shows it checks the types of its fields
    source: Optional[JsonObject] = None
    cxxflags: tuple[str, ...] = ()
    system_libs: tuple[str, ...] = ()
    libs: tuple[str, ...] = ()
    # Shown by the catalogue only, as older versions wrote them: kept as objects.
    digests: Optional[JsonObject] = None
    build_key: Optional[str] = None
    verification: Optional[JsonObject] = None

    def __post_init__(self) -> None:
        for rel in self.files:
            _rel_path(rel, f"files.{shown(rel, quote=False)}")

    def text(self, section: str, key: str) -> str:
        """A string field of the free-form objects model and source ("" when missing or not a string)."""
        value = (getattr(self, section) or {}).get(key)
        return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class ModelInfo(Document):
    author: str
    description: str
    serving_key: str


@dataclass(frozen=True)
class ToolInfo(Document):
    name: str
    version: str


def _runtime_part(value: str, where: str) -> str:
    if not RUNTIME_PART.fullmatch(value):
        raise InvalidInput(f"{where}: invalid runtime part name {shown(value)}")
    return value


@dataclass(frozen=True)
class ModelManifest(Document):
    """A model package's manifest.json: what went in (source, digests, toolchain, compilation),
    what came out (signature, reference cases, shared constants, every file's digest), the runtime
    it needs and what verification found. build_key is None for `tfaot-dist compile`."""

    package: str = field(metadata=check(_model_package))
    name: str
    version: str = field(metadata=check(names.version))
    build_key: Optional[str]
    source: dict[str, str]
    digests: dict[str, str]
    model: ModelInfo
    toolchain: ToolchainRecord
    compilation: Compilation
    requires: tuple[Requirement, ...]
    signature: Signature
    reference: Reference
    tool: ToolInfo
    constants: SharedConstants
    files: dict[str, FileDigest] = field(metadata=check(_each(_rel_path)))
    verification: Optional[Verification]  # None only between assembly and verification
    # The XLA runtime parts (cxx/runtime_parts.py) the package's archive carries: those its objects call.
    runtime_parts: tuple[str, ...] = field(
        default=(), metadata=check(_each(_runtime_part), omit_default=True)
    )


def _runtime_levels(levels: tuple[str, ...], where: str) -> tuple[str, ...]:
    return names.cpu_levels(list(levels), where) if levels else levels


@dataclass(frozen=True)
class RuntimeManifest(Document):
    """The tfaot-xla-runtime package's manifest.json: the runtime build it holds (runtime_key, the
    compiler and the flags consumers compile with), its libraries and every file's digest."""

    kind: Literal["runtime"]
    name: str = field(metadata=check(_one_of(RUNTIME)))
    package: str = field(metadata=check(_one_of(RUNTIME)))
    version: str = field(metadata=check(names.version))
    runtime_key: str
    tensorflow_version: str
    compiler: str
    cxxflags: tuple[str, ...]
    libs: tuple[str, ...] = field(metadata=check(_each(_rel_path)))  # lib/libNAME.a
    system_libs: tuple[str, ...]  # -lNAME
    scram_tool: str
    tool: ToolInfo
    files: dict[str, FileDigest] = field(metadata=check(_each(_rel_path)))
    # Levels of the runtime's matrix kernels; absent in packages made before the levels.
    cpu_levels: tuple[str, ...] = field(default=(), metadata=check(_runtime_levels, omit_default=True))


@dataclass(frozen=True)
class CompiledFiles(Document):
    """What the worker wrote for one batch size (file names in its output directory)."""

    header: str = field(metadata=check(_file_name))
    objects: tuple[str, ...] = field(metadata=check(_each(_file_name)))


@dataclass(frozen=True)
class CompileRequest(Document):
    """The worker's "compile" request (worker/tf_worker.py do_compile); the field order is the wire order."""

    saved_model: str
    serving_key: str
    batch_sizes: tuple[int, ...]
    namespace: str
    class_name: str
    output_dir: str
    target_triple: Optional[str]
    target_cpu: Optional[str]
    reference_dir: str
    reference_sizes: tuple[int, ...]
    # Compile each batch size once per level (target_cpu unused); () = once for target_cpu.
    cpu_levels: tuple[str, ...] = field(default=(), metadata={"omit_default": True})
    # Selu and Elu: "tensorflow" (exp(x) - 1, the worker's default) or "xla" (expm1).
    activation_formulas: str = field(default="tensorflow", metadata={"omit_default": True})
    # Bounds on declared input sizes (limits.py); 0: none.
    max_row_elements: int = field(default=0, metadata={"omit_default": True})
    max_batch_bytes: int = field(default=0, metadata={"omit_default": True})

    def to_json(self) -> JsonObject:
        return {"op": "compile", **super().to_json()}


@dataclass(frozen=True)
class CompileAnswer(Document):
    """The worker's answer to a compile request: files per batch size, signature, reference cases.

    files is keyed "N" for batch size N (of the lowest level, or the only target), "N@LEVEL" for
    the other levels of a multi-level request.
    """

    ok: bool
    signature: Signature
    files: dict[str, CompiledFiles]
    reference: tuple[ReferenceCase, ...]
    tensorflow_version: str
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds, for --verbose readers
    xla_flags: tuple[
        str, ...
    ] = ()  # every XLA flag tfcompile ran with (our defaults, the config's, saved_model_cli's)
    target_features: dict[str, str] = field(default_factory=dict)  # CPU level -> LLVM features given
    rewritten_activations: dict[str, int] = field(
        default_factory=dict
    )  # op -> nodes given TensorFlow's formula
    rewritten_ops: dict[str, int] = field(default_factory=dict)  # op -> nodes written with other ops (Conv3D)


@dataclass(frozen=True)
class CheckRequest(Document):
    """The worker's "check" request: load the SavedModel, read its signature, list XLA op support."""

    saved_model: str
    serving_key: str
    batch_sizes: tuple[int, ...] = field(default=(), metadata={"omit_default": True})  # to compile, if known
    max_row_elements: int = field(default=0, metadata={"omit_default": True})  # bounds (limits.py); 0: none
    max_batch_bytes: int = field(default=0, metadata={"omit_default": True})

    def to_json(self) -> JsonObject:
        return {"op": "check", **super().to_json()}


@dataclass(frozen=True)
class OpSupport(Document):
    op: str
    xla_cpu: bool  # XLA has a CPU kernel for it
    nodes: tuple[str, ...] = field(default=(), metadata=OMIT_NONE)  # where it is used (unsupported ops only)
    advice: str = field(default="", metadata=OMIT_NONE)  # what to change (unsupported ops only)


@dataclass(frozen=True)
class CheckAnswer(Document):
    ok: bool
    signature: Signature
    ops: tuple[OpSupport, ...]
    # tfcompile's error for the graph compile gets (frozen at batch size 1), when every op has a kernel
    compile_error: Optional[str] = field(default=None, metadata=OMIT_NONE)
    timings: dict[str, float] = field(default_factory=dict)
