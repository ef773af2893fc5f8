"""Strict patterns for every value that reaches a file name, C++, XML, a spec or a command line.

Each check returns the value unchanged or raises InvalidInput naming where the
value came from (`where`, e.g. "registry/models/x.yaml: name").
"""

from __future__ import annotations

import re
from functools import lru_cache

from packaging.version import InvalidVersion, Version

from tfaot_dist.errors import InvalidInput

MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
CPP_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# A git ref as a user types it: branch, tag or commit; no "..", no leading "-".
GIT_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
# A relative path inside a source tree: plain segments, no "..", no leading "/".
REL_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")
# Values handed to LLVM/XLA: target triples, CPU names, flags.
TARGET_TRIPLE = re.compile(r"[a-z0-9_]+(-[a-z0-9_.]+){1,4}")
TARGET_CPU = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# A flag goes into XLA_FLAGS (no shell); "=" and "*" appear in backend options:
# --xla_backend_extra_options=xla_llvm_ir_gemm_tile_size=11:9:1*vectwidth
XLA_FLAG = re.compile(r"--[a-z0-9_]+(=[A-Za-z0-9_.,:+*=-]*)?")
# Free text (author, description): one printable line.
FREE_TEXT = re.compile(r"[^\x00-\x1f\x7f]{0,500}")
REQUIREMENT_CHARS = re.compile(r"[A-Za-z0-9_.\-\[\],<>=!~ ]{1,100}")  # a pip requirement of registry.yaml
BATCH_RULE = re.compile(r"([1-9][0-9]{0,5}):([1-9][0-9]{0,5}(,[1-9][0-9]{0,5}){0,4095})")  # N:B1,B2,...
SHARD = re.compile(r"([1-9][0-9]{0,3})/([1-9][0-9]{0,3})")  # build --shard I/N

# Packages, their files and their channels.
RUNTIME_PACKAGE = "tfaot-xla-runtime"
# A release's own runtime (cmsdist's package and scram tool): what packages built against it require.
RELEASE_RUNTIME_PACKAGE = "tensorflow-xla-runtime"
MODEL_PACKAGE = re.compile(rf"tfaot-model-{MODEL_NAME.pattern}")
PACKAGE_NAME = re.compile(rf"{MODEL_PACKAGE.pattern}|{RUNTIME_PACKAGE}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# A path inside a package or a channel (versions may hold "+"): plain segments, no leading "/".
PACKAGE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*")
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")  # what the worker says it wrote
TOOL_FILE = re.compile(r"scram\.d/[A-Za-z0-9_.+-]+\.xml")  # an area's tool file, relative to the area
SCRAM_TOOL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")
# A directory that goes into tool files (XML attributes) and env.sh lines as it is: one character of it, and it.
AREA_PATH_CHAR = re.compile(r"[A-Za-z0-9._/+,=@~%-]")
AREA_PATH = re.compile(rf"/{AREA_PATH_CHAR.pattern}*")
HTTP_URL = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?")
# A git remote git may be given: scheme://..., an absolute local path, or scp-like user@host:path.
GIT_URL = re.compile(
    r"(?:(?:https?|ssh|git|file)://[^\s\\]+"
    r"|/[^\s\\:]*"
    r"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s\\:]+)"
)
# oci://HOST[:PORT]/NAMESPACE channels; a tag is a version with "+" as "_" and "!" as "-".
OCI_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?")
OCI_NAMESPACE = re.compile(
    r"[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*"
)  # lowercase components
OCI_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")

# What may sit in a CMake string or a pkg-config field without meaning anything there.
VERSION_CHARS = re.compile(r"[A-Za-z0-9.+!]{1,100}")  # PEP 440 versions, normalized, maybe with a local label
COMPILER_FLAG = re.compile(r"-[A-Za-z0-9_=+.,/-]{1,200}")
SYSTEM_LIB = re.compile(r"-l[A-Za-z0-9_+.-]{1,100}")
STATIC_LIB = re.compile(r"lib/lib([A-Za-z0-9_+-][A-Za-z0-9_+.-]{0,99})\.a")
SAFE_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[A-Za-z0-9._~:/@+-]{1,500}")

# Anything placed in a spec, a shell line or a heredoc: no "%", "$", quotes, backticks, spaces or line breaks.
SPEC_VALUE = re.compile(r"[A-Za-z0-9._~:/@+,=-]{1,500}")
_SPEC_URL_CHARS = r"[A-Za-z0-9._~:/@+-]"
SPEC_SCHEME_URL = re.compile(rf"(?:https?|ssh|git|file)://{_SPEC_URL_CHARS}+")
SPEC_ABSOLUTE_PATH = re.compile(rf"/{_SPEC_URL_CHARS}*")
SPEC_SCP_URL = re.compile(r"([A-Za-z0-9._-]+@[A-Za-z0-9.-]+):(" + _SPEC_URL_CHARS + r"+)")
EMAIL = re.compile(r"[A-Za-z0-9._+-]+@[A-Za-z0-9.-]+")
# A model fetched from a CMSDATA repository (github.com/cms-data/REPO) builds from the release's
# data-REPO package, installed by data-build-github.file under $DATA_REPO_ROOT/<REPO, '-' -> '/'>/data.
CMS_DATA_URL = re.compile(r"https://github\.com/cms-data/([A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*?)(?:\.git)?/?")
COMMIT_LIKE = re.compile(r"[0-9a-f]{7,40}")  # a ref that may be an abbreviated commit, not a branch

# C++ keywords that cannot name a class or namespace.
CPP_KEYWORDS = frozenset(
    [
        "alignas",
        "alignof",
        "and",
        "and_eq",
        "asm",
        "auto",
        "bitand",
        "bitor",
        "bool",
        "break",
        "case",
        "catch",
        "char",
        "char8_t",
        "char16_t",
        "char32_t",
        "class",
        "compl",
        "concept",
        "const",
        "consteval",
        "constexpr",
        "constinit",
        "const_cast",
        "continue",
        "co_await",
        "co_return",
        "co_yield",
        "decltype",
        "default",
        "delete",
        "do",
        "double",
        "dynamic_cast",
        "else",
        "enum",
        "explicit",
        "export",
        "extern",
        "false",
        "float",
        "for",
        "friend",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "mutable",
        "namespace",
        "new",
        "noexcept",
        "not",
        "not_eq",
        "nullptr",
        "operator",
        "or",
        "or_eq",
        "private",
        "protected",
        "public",
        "register",
        "reinterpret_cast",
        "requires",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "static_assert",
        "static_cast",
        "struct",
        "switch",
        "template",
        "this",
        "thread_local",
        "throw",
        "true",
        "try",
        "typedef",
        "typeid",
        "typename",
        "union",
        "unsigned",
        "using",
        "virtual",
        "void",
        "volatile",
        "wchar_t",
        "while",
        "xor",
        "xor_eq",
        "std",
        "tfaot",
    ]
)


def _check(pattern: re.Pattern[str], value: object, where: str, what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidInput(f"{where}: invalid {what} {value!r}")
    return value


def has_credentials(url: str) -> bool:
    """Whether url carries credentials: user:password@ in any scheme, any user@ in http(s) and oci
    (tokens are given as user names there); ssh's user@host is no secret."""
    scheme, sep, rest = url.partition("://")
    userinfo = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[0] if sep else ""
    return bool(userinfo) and (":" in userinfo or scheme.lower() in ("http", "https", "oci"))


def no_credentials(value: object, where: str, how: str = "git") -> None:
    """Refuse a URL that carries credentials, without showing them: whatever is in a source URL ends
    up printed and in every package's manifest, tool file and catalogue page."""
    if isinstance(value, str) and has_credentials(value):
        scheme, _, rest = value.partition("://")
        shown_url = f"{scheme}://***@{rest.split('@', 1)[1][:100]}"
        helpers = {
            "git": "a git credential helper (git config credential.helper), GIT_ASKPASS, or a ~/.netrc entry",
            "oci": "TFAOT_DIST_OCI_TOKEN (and TFAOT_DIST_OCI_USERNAME)",
        }.get(how, "a ~/.netrc entry for the host")
        raise InvalidInput(
            f"{where}: {shown_url}: credentials in a URL are refused (they would be printed and "
            f"written into packages); give them through {helpers}"
        )


def model_name(value: object, where: str) -> str:
    return _check(MODEL_NAME, value, where, "model name (expected ^[a-z0-9][a-z0-9-]{0,62}$)")


def cpp_identifier(value: object, where: str) -> str:
    value = _check(CPP_IDENTIFIER, value, where, "C++ identifier")
    if value in CPP_KEYWORDS or value.startswith("__") or re.match(r"_[A-Z]", value):
        raise InvalidInput(f"{where}: {value!r} is reserved in C++")
    return value


def version(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{where}: version must be a quoted string, got {value!r}")
    normalized = _normalized_version(value[:200])
    if normalized is None:
        raise InvalidInput(f"{where}: invalid version {value!r} (expected PEP 440)")
    if normalized != value:
        raise InvalidInput(f"{where}: version {value!r} is not normalized (write {normalized!r})")
    return value


@lru_cache(maxsize=65536)
def _normalized_version(value: str) -> str | None:
    """PEP 440's normal form of value (None: not a version); cached, as an index repeats its versions."""
    try:
        return str(Version(value))
    except InvalidVersion:
        return None


def git_ref(value: object, where: str) -> str:
    value = _check(GIT_REF, value, where, "git ref")
    if ".." in value or value.endswith((".lock", "/", ".")) or "//" in value:
        raise InvalidInput(f"{where}: invalid git ref {value!r}")
    return value


def commit_sha(value: object, where: str) -> str:
    return _check(COMMIT_SHA, value, where, "commit (expected 40 lowercase hex digits)")


def rel_path(value: object, where: str) -> str:
    value = _check(REL_PATH, value, where, "relative path")
    if any(part in ("..", ".") for part in value.split("/")):
        raise InvalidInput(f"{where}: path {value!r} must not contain '.' or '..' segments")
    return value


def target_triple(value: object, where: str) -> str:
    return _check(TARGET_TRIPLE, value, where, "target triple")


def target_cpu(value: object, where: str) -> str:
    if value == "":
        return value
    return _check(TARGET_CPU, value, where, "target cpu")


# x86-64 micro-architecture levels of the psABI, lowest first; also LLVM CPU names for tfcompile.
CPU_LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")


def cpu_levels(value: object, where: str) -> tuple[str, ...]:
    """A non-empty list of distinct psABI level names, returned lowest first."""
    if not isinstance(value, list) or not value:
        raise InvalidInput(
            f"{where}: expected a non-empty list of CPU levels ({', '.join(CPU_LEVELS)}), got {value!r}"
        )
    for level in value:
        if level not in CPU_LEVELS:
            raise InvalidInput(
                f"{where}: unknown CPU level {level!r} (expected one of {', '.join(CPU_LEVELS)})"
            )
    if len(set(value)) != len(value):
        raise InvalidInput(f"{where}: duplicate CPU levels in {value!r}")
    return tuple(sorted(value, key=CPU_LEVELS.index))


def level_suffix(level: str) -> str:
    """The C++ identifier part of a level: "x86-64-v3" -> "x86_64_v3"."""
    if level not in CPU_LEVELS:
        raise InvalidInput(f"unknown CPU level {level!r}")
    return level.replace("-", "_")


# How Selu and Elu are compiled: TensorFlow's CPU formula (exp(x) - 1, the default) or XLA's (expm1).
ACTIVATION_FORMULAS = ("tensorflow", "xla")


def activation_formulas(value: object, where: str) -> str:
    if value not in ACTIVATION_FORMULAS:
        raise InvalidInput(f"{where}: expected one of {', '.join(ACTIVATION_FORMULAS)}, got {value!r}")
    return str(value)


def xla_flag(value: object, where: str) -> str:
    return _check(XLA_FLAG, value, where, "flag (expected --name or --name=value)")


def serving_key(value: object, where: str) -> str:
    """A SavedModel signature key: an identifier or a relative-path-like name (serving_default, serve/v2)."""
    if not isinstance(value, str) or not (CPP_IDENTIFIER.fullmatch(value) or REL_PATH.fullmatch(value)):
        raise InvalidInput(f"{where}: invalid serving key {value!r}")
    return value


def free_text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{where}: expected a string, got {type(value).__name__}")
    return _check(FREE_TEXT, value, where, "text (one line, at most 500 characters)")
