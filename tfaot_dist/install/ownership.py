"""What a package may install into an area: only what is its own.

Areas hold many packages side by side, and what one package ships must never stand in for
another's: a tool file under another tool's name (scram would take it), a header that comes
first in CPATH, a library found first through LIBRARY_PATH. So every file of a package from a
channel is checked against the layout of its own name before anything is written:

    model tfaot-model-NAME     include/tfaot-model-NAME/**, lib/*.o, lib/libtfaot-model-NAME.a,
                               lib/pkgconfig/tfaot-model-NAME.pc, lib/cmake/tfaot-model-NAME/**,
                               share/tfaot-model-NAME/**, etc/scram.d/tfaot-model-NAME.xml, sbom.cdx.json
    runtime tfaot-xla-runtime  include/** (not include/tfaot-model-*), lib/*.a and *.o (not
                               libtfaot-model-*), lib/pkgconfig/tfaot-xla-runtime.pc,
                               lib/cmake/tfaot-xla-runtime/**, licenses/**, share/tfaot-xla-runtime/**,
                               etc/scram.d/tfaot-xla-runtime.xml, sbom.cdx.json

and its tool file is read as SCRAM reads it and held to our conventions
(scram_tool.check_conventions: its own name, variables pointing into the package only, its own
libraries). Anything else is refused with one line naming the file (exit 7).
"""

import fnmatch

from tfaot_dist import names
from tfaot_dist.cxx import scram_tool
from tfaot_dist.documents import Manifest
from tfaot_dist.errors import IntegrityError

RUNTIME = names.RUNTIME_PACKAGE


def allowed_files(name: str) -> tuple[list[str], list[str]]:
    """(patterns a file of package name may match, patterns it must not match); fnmatch, "*" spans "/"."""
    if name == RUNTIME:
        return (
            [
                "include/*",
                "lib/*.a",
                "lib/*.o",
                f"lib/pkgconfig/{name}.pc",
                f"lib/cmake/{name}/*",
                "licenses/*",
                f"share/{name}/*",
                f"etc/scram.d/{name}.xml",
                "sbom.cdx.json",
            ],
            ["include/tfaot-model-*", "lib/libtfaot-model-*", "lib/*/*.a", "lib/*/*.o"],
        )
    return (
        [
            f"include/{name}/*",
            "lib/*.o",
            f"lib/lib{name}.a",
            f"lib/pkgconfig/{name}.pc",
            f"lib/cmake/{name}/*",
            f"share/{name}/*",
            f"etc/scram.d/{name}.xml",
            "sbom.cdx.json",  # the bill of materials (trust/sbom.py), in the package's own directory
        ],
        ["lib/*/*.o"],
    )


def tool_file(name: str) -> str:
    """The one tool file a package may have, relative to it (and to the area, under scram.d/)."""
    return f"etc/scram.d/{name}.xml"


def check_files(manifest: Manifest, label: str) -> None:
    name = manifest.package
    allowed, refused = allowed_files(name)
    for rel in sorted(manifest.files):
        if not any(fnmatch.fnmatchcase(rel, p) for p in allowed) or any(
            fnmatch.fnmatchcase(rel, p) for p in refused
        ):
            raise IntegrityError(
                f"{label}: {rel} is not {name}'s to install (a package installs only its own "
                f"files: see the README's security section)"
            )


def check_tool(manifest: Manifest, rel: str, text: bytes, label: str) -> scram_tool.ToolFile:
    """The package's tool file, read as SCRAM reads it and held to our conventions."""
    name = manifest.package
    if rel != tool_file(name):
        raise IntegrityError(
            f"{label}: {rel} is not {name}'s to install (its tool file is {tool_file(name)})"
        )
    try:
        decoded = text.decode("utf-8")
        if name == RUNTIME:
            archives = [
                f.removeprefix("lib/") for f in manifest.files if fnmatch.fnmatchcase(f, "lib/lib*.a")
            ]
            system = [flag.removeprefix("-l") for flag in manifest.system_libs if flag.startswith("-l")]
            return scram_tool.check_conventions(
                decoded, scram_tool.RUNTIME_TOOL, "", archives, system, system_include=True
            )
        uses = {r.name for r in manifest.requires}
        return scram_tool.check_conventions(decoded, name, manifest.version, [f"lib{name}.a"], (), uses)
    except (ValueError, UnicodeDecodeError) as exc:
        raise IntegrityError(
            f"{label}: {rel}: {exc}; refused (a tool file describes its own package only)"
        ) from None


def check_package(manifest: Manifest, tools: tuple[tuple[str, bytes], ...], label: str) -> None:
    """Every file and the tool file of a package from a channel, before anything is written."""
    check_files(manifest, label)
    for rel, text in tools:
        check_tool(manifest, rel, text, label)
