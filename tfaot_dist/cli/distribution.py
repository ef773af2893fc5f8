"""Commands that hand packages on: publish and yank (a channel), specs (cmsBuild and rpm)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tfaot_dist.cli.common import Options, arg, command, directory, emit, log
from tfaot_dist.errors import UsageError
from tfaot_dist.trust.options import KEY_ENV

if TYPE_CHECKING:
    from tfaot_dist.trust.signing import Signing


def sign_option() -> Any:
    """--sign KEY, of every command that changes a channel's signed metadata."""
    return arg(
        "--sign",
        type=Path,
        metavar="KEY",
        help=f"sign the channel's TUF metadata with this private key file (or ${KEY_ENV}: the key's "
        "text); a signed channel's first signed change creates its root from the key",
    )


def signing_of(sign: Path | None, timestamp_expiry: str | None) -> Signing | None:
    """What --sign (or $TFAOT_DIST_SIGNING_KEY) and --timestamp-expiry ask for (trust/commands.py);
    None when neither is given, without loading cryptography and python-tuf (an unsigned change,
    which a signed channel refuses)."""
    if sign is None and not os.environ.get(KEY_ENV) and timestamp_expiry is None:
        return None
    from tfaot_dist.trust.commands import signing

    return signing(sign, timestamp_expiry)


def timestamp_expiry_option() -> Any:
    return arg(
        "--timestamp-expiry",
        metavar="DURATION",
        help="lifetime of the signed timestamp: 30s, 12h, 7d (default 7d; refresh it with "
        "`tfaot-dist trust refresh-timestamp`)",
    )


@dataclass(frozen=True)
class PublishOptions(Options):
    channel: str = arg(
        "--channel",
        required=True,
        metavar="DIR|oci://HOST/NS",
        help="channel directory (serve it over HTTP as is) or oci://HOST[:PORT]/NAMESPACE",
    )
    dist: Path = arg(
        "--dist", type=Path, default=Path("dist"), help="directory of built packages (default: ./dist)"
    )
    packages: list[str] = arg(
        nargs="*",
        metavar="PACKAGE",
        help="only these archives of --dist (NAME or a specifier, e.g. 'my-model>=1.1'), with the "
        "runtimes they require (default: every archive)",
    )
    sign: Path | None = sign_option()
    timestamp_expiry: str | None = timestamp_expiry_option()


@command(
    "publish",
    PublishOptions,
    summary="add the package archives of a dist directory to a channel",
    description="Verify every archive in --dist against its manifest and add it to the channel directory: "
    "packages/NAME/VERSION/, index.json and a browsable catalogue (index.html, one page per "
    "version). A published version never changes: the same bytes again are a no-op, other bytes "
    "exit 7. Serve the directory with any static HTTP server. An oci://HOST/NAMESPACE channel pushes "
    "each package as an OCI artifact and keeps the index as one (credentials: "
    "TFAOT_DIST_OCI_TOKEN, TFAOT_DIST_OCI_USERNAME; TFAOT_DIST_OCI_REGISTRY=HOST[:PORT] keeps the "
    "token for that registry alone).",
    examples=(
        "tfaot-dist publish --channel /srv/channel --dist _work/dist",
        "python3 -m http.server -d /srv/channel 8000   # then open http://127.0.0.1:8000/",
        "tfaot-dist publish --channel oci://ghcr.io/OWNER/tfaot",
    ),
)
def cmd_publish(o: PublishOptions) -> int:
    from tfaot_dist.channels import publishing

    published = publishing.publish(
        directory(o.dist), o.channel, o.cache, log, o.packages, signing_of(o.sign, o.timestamp_expiry)
    )
    emit(
        o,
        {"channel": o.channel, "packages": [vars(p) for p in published]},
        "\n".join(f"{p.name} {p.version}: {p.status} ({p.sha256[:12]})" for p in published),
    )
    return 0


@dataclass(frozen=True)
class YankOptions(Options):
    requirement: str = arg(metavar="NAME==VERSION", help="the version to yank")
    channel: str = arg("--channel", required=True, metavar="DIR|oci://HOST/NS", help="the channel")
    reason: str | None = arg(
        "--reason", exclusive="mode", metavar="TEXT", help="why (one line, shown by setup and the catalogue)"
    )
    undo: bool = arg("--undo", exclusive="mode", action="store_true", help="take the yank back")
    sign: Path | None = sign_option()
    timestamp_expiry: str | None = timestamp_expiry_option()


@command(
    "yank",
    YankOptions,
    summary="mark a published version as yanked (or take the mark back)",
    description="Mark one version in the channel's index as yanked, with the reason: setup skips it for names "
    "and ranges and installs it only when it is pinned exactly (NAME==VERSION), with a warning "
    "naming the reason; the catalogue shows it struck through. The archive stays, so areas and "
    "builds that use it keep working. Directory and OCI channels.",
    examples=(
        "tfaot-dist yank 'my-model==1.0.0' --reason 'wrong normalisation, use 1.0.1' --channel /srv/channel",
        "tfaot-dist yank my-model==1.0.0 --undo --channel oci://ghcr.io/OWNER/tfaot",
    ),
)
def cmd_yank(o: YankOptions) -> int:
    from tfaot_dist.channels import publishing

    if not o.undo and o.reason is None:
        raise UsageError("yank: give --reason TEXT (or --undo to take a yank back)")
    rows, changed = publishing.yank(
        o.channel,
        o.cache,
        o.requirement,
        None if o.undo else o.reason,
        log,
        signing_of(o.sign, o.timestamp_expiry),
    )
    row = rows[0]
    state = f"yanked ({row.yanked})" if row.yanked else "not yanked"
    emit(
        o,
        {
            "channel": o.channel,
            "name": row.name,
            "version": row.version,
            "versions": [r.version for r in rows],  # every spelling of the version (1.0, 1.0.0)
            "yanked": row.yanked,
            "changed": changed,
        },
        f"{row.name} {' and '.join(r.version for r in rows)}: {state}{'' if changed else ', as it was'} "
        f"in {o.channel}",
    )
    return 0


@dataclass(frozen=True)
class SpecsOptions(Options):
    out: Path = arg("--out", type=Path, required=True, help="output directory of the specs")
    flavor: Literal["cmsbuild", "rpm", "cmsbuild-prebuilt"] = arg(
        "--flavor",
        choices=["cmsbuild", "rpm", "cmsbuild-prebuilt"],
        default="cmsbuild",
        help="cmsbuild: CMSDIST specs (default); rpm: standard rpm specs; cmsbuild-prebuilt: "
        "CMSDIST specs that install the verified archives of a channel (--channel)",
    )
    channel: str | None = arg(
        "--channel",
        metavar="URL",
        help="cmsbuild-prebuilt: the http(s) URL of the channel the packages were published to",
    )
    check: bool = arg(
        "--check", action="store_true", help="write nothing; exit 1 and list files that are stale"
    )
    sources: Path | None = arg(
        "--sources",
        type=Path,
        metavar="DIST",
        help="rpm: verify the package archives in DIST and copy them into OUT/SOURCES",
    )


@command(
    "specs",
    SpecsOptions,
    summary="render cmsBuild or rpm specs of the registry",
    description="Render the packaging specs of every registry entry from spec_templates/ (byte-identical for "
    "the same registry and history).",
    examples=(
        "tfaot-dist specs --out specs/   # with --check: exit 1 if stale",
        "tfaot-dist specs --flavor rpm --out rpm-specs/ --sources dist/",
        "tfaot-dist specs --flavor cmsbuild-prebuilt --channel https://host/channel/ --out specs/",
    ),
)
def cmd_specs(o: SpecsOptions) -> int:
    from tfaot_dist.registry import Registry
    from tfaot_dist.specs import flavors

    result = flavors.generate(
        Registry.existing(o.registry),
        o.flavor,
        directory(o.out),
        check=o.check,
        sources=o.sources.absolute() if o.sources else None,
        log=log,
        channel=o.channel,
    )
    if o.check:
        text = "\n".join(f"stale: {o.out / rel}" for rel in result.stale) or f"{o.out}: up to date"
    else:
        text = "\n".join(f"wrote {o.out / rel}" for rel in result.written) or f"{o.out}: up to date"
    emit(o, result.as_dict(), text)
    return 1 if result.stale else 0
