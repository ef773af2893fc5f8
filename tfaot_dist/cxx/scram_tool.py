"""scram tool files (etc/scram.d/TOOL.xml) of model and runtime packages, in cmsdist's form.

SCRAM reads a tool file by wrapping its whole text in a root element and
parsing that with a standard XML parser, so a tool file is a fragment: no XML
declaration. cmsdist's conventions, which SCRAM relies on:

    <tool name="NAME" version="VERSION">     NAME in lower case
      <lib name="L"/>                        -lL, found in LIBDIR
      <client>
        <environment name="NAME_BASE" default="@TOOL_ROOT@"/>   NAME upper-cased, '-' -> '_'
        <environment name="LIBDIR" default="$NAME_BASE/lib"/>
        <environment name="INCLUDE" default="$NAME_BASE/include"/>
      </client>
      <use name="OTHER"/>  <flags FLAG="..."/>
    </tool>

The runtime is the tool tfaot-xla-runtime, next to (never instead of) a
release's tensorflow-xla-runtime. Its static archives are linked with
--exclude-libs: a plugin library built from them exports none of their
symbols, so XLA runtimes of two TensorFlow versions in one process (ours
and the release's shared libtf_xla_runtime.so) cannot interpose.
"""

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field

from tfaot_dist import names
from tfaot_dist.util.render import render

RUNTIME_TOOL = "tfaot-xla-runtime"
TOOL_ROOT = "@TOOL_ROOT@"
# Elements and attributes that cmsdist's tool files use and SCRAM's tool-file reader knows.
ATTRIBUTES = {
    "tool": {"name", "version"},
    "info": {"url"},
    "lib": {"name"},
    "client": set(),
    "environment": {"name", "default"},
    "use": {"name"},
    "flags": {"LDFLAGS", "SYSTEM_INCLUDE"},
}


def base_variable(tool: str) -> str:
    """The variable SCRAM treats as the tool's root: NAME_BASE, upper case, '-' -> '_'."""
    return tool.upper().replace("-", "_") + "_BASE"


def exclude_libs(archives: list[str]) -> str:
    """The linker flag that keeps the archives' symbols out of what a shared library exports."""
    return "-Wl,--exclude-libs," + ":".join(archives)


def render_model_tool(package: str, version: str, url: str, runtime_tool: str = RUNTIME_TOOL) -> str:
    """runtime_tool: the runtime's tool the model uses (ours, or the release's tensorflow-xla-runtime)."""
    text = render(
        "scram_tool.xml.j2",
        package=package,
        version=version,
        url=url,
        libs=[package],
        base_var=base_variable(package),
        root=TOOL_ROOT,
        uses=[runtime_tool],
        ldflags=[exclude_libs([f"lib{package}.a"])],
    )
    parse(text)  # what scram will read
    return text


def render_runtime_tool(version: str, archives: list[str], system_libs: list[str]) -> str:
    """archives: file names (libX.a) in lib/; system_libs: -lY flags."""
    text = render(
        "runtime_tool.xml.j2",
        tool=RUNTIME_TOOL,
        version=version,
        libs=[a.removeprefix("lib").removesuffix(".a") for a in archives],
        system_libs=[flag.removeprefix("-l") for flag in system_libs if flag.startswith("-l")],
        ldflags=[exclude_libs(archives)],
        base_var=base_variable(RUNTIME_TOOL),
        root=TOOL_ROOT,
    )
    parse(text)
    return text


@dataclass
class ToolFile:
    """A tool file as SCRAM sees it."""

    name: str
    version: str
    libs: list[str] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    flags: dict[str, list[str]] = field(default_factory=dict)
    url: str = ""


def parse(text: str) -> ToolFile:
    """Read a tool file the way SCRAM does (the text inside a root element, a standard XML parser).

    Raises ValueError for anything SCRAM would refuse or cmsdist does not write.
    """
    try:
        root = ET.fromstringlist(["<root>", text, "</root>"])
    except ET.ParseError as exc:
        raise ValueError(f"not a tool file SCRAM can read: {exc}") from None
    if [child.tag for child in root] != ["tool"]:
        raise ValueError(f"expected one <tool> element, got {[child.tag for child in root]}")
    tool = root[0]
    for element in tool.iter():
        if element.tag not in ATTRIBUTES:
            raise ValueError(f"unexpected element <{element.tag}>")
        if extra := set(element.attrib) - ATTRIBUTES[element.tag]:
            raise ValueError(f"<{element.tag}>: unexpected attributes {sorted(extra)}")
    name = tool.get("name", "")
    if not names.SCRAM_TOOL_NAME.fullmatch(name):
        raise ValueError(f"tool name {name!r} is not a lower-case scram tool name")
    result = ToolFile(name=name, version=tool.get("version", ""))
    for child in tool:
        if child.tag == "lib":
            result.libs.append(child.get("name", ""))
        elif child.tag == "use":
            result.uses.append(child.get("name", ""))
        elif child.tag == "info":
            result.url = child.get("url", "")
        elif child.tag == "flags":
            for key, value in child.attrib.items():
                result.flags.setdefault(key, []).extend(value.split())
        elif child.tag == "client":
            for env in child:
                if env.tag != "environment":
                    raise ValueError(f"<client>: unexpected element <{env.tag}>")
                result.environment[env.get("name", "")] = env.get("default", "")
    return result


_EXCLUDE_LIBS = re.compile(r"-Wl,--exclude-libs,(lib[A-Za-z0-9_+.-]+\.a(:lib[A-Za-z0-9_+.-]+\.a)*)")
_LIB_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9_+.-]{0,99}")


def check_conventions(
    text: str,
    name: str,
    version: str,
    archives: Iterable[str],
    system_libs: Iterable[str] = (),
    uses: Iterable[str] = (),
    system_include: bool = False,
) -> ToolFile:
    """A tool file from elsewhere (a channel's package), read as SCRAM reads it (parse()) and held to
    what our packages write, so that it can only describe its own package: the tool name `name`;
    exactly the three variables NAME_BASE=@TOOL_ROOT@, LIBDIR and INCLUDE below it (nothing like
    LD_PRELOAD); libs only its own archives (libX.a in archives) and system_libs; uses only among
    uses; LDFLAGS only --exclude-libs of its own archives; SYSTEM_INCLUDE="1" only if system_include;
    an info url without credentials. Raises ValueError saying what differs."""
    tool = parse(text)
    if tool.name != name:
        raise ValueError(f"tool name {tool.name!r}, expected {name!r}")
    if not names.VERSION_CHARS.fullmatch(tool.version):
        raise ValueError(f"tool version {tool.version!r} is not a version")
    if tool.version != version and version:
        raise ValueError(f"tool version {tool.version!r}, expected {version!r}")
    base = base_variable(name)
    expected = {base: TOOL_ROOT, "LIBDIR": f"${base}/lib", "INCLUDE": f"${base}/include"}
    if tool.environment != expected:
        raise ValueError(
            f"environment {sorted(tool.environment)} differs from {sorted(expected)} pointing into "
            "the package"
        )
    own = {a.removeprefix("lib").removesuffix(".a") for a in archives}
    allowed = own | set(system_libs)
    if bad := [lib for lib in tool.libs if lib not in allowed or not _LIB_NAME.fullmatch(lib)]:
        raise ValueError(f"lib {bad[0]!r} is not one of the package's own libraries")
    if bad := [use for use in tool.uses if use not in set(uses)]:
        raise ValueError(f"use of {bad[0]!r}, which the package does not require")
    for key, values in tool.flags.items():
        for value in values:
            match = _EXCLUDE_LIBS.fullmatch(value) if key == "LDFLAGS" else None
            if (
                key == "LDFLAGS"
                and match
                and all(a.removeprefix("lib").removesuffix(".a") in own for a in match.group(1).split(":"))
            ):
                continue
            if key == "SYSTEM_INCLUDE" and system_include and value == "1":
                continue
            raise ValueError(f"flag {key}={value!r} is not one our packages write")
    if tool.url and (not names.SAFE_URL.fullmatch(tool.url) or names.has_credentials(tool.url)):
        raise ValueError("info url is not a plain URL without credentials")
    return tool
