"""Signed build provenance: for every archive of a signed channel, an in-toto Statement (v1) with a SLSA
provenance predicate (v1) naming the archive's sha256 as its subject and the build's inputs as its
manifest records them (source and commit, build key, toolchain, the runtime it requires, CPU levels),
in a DSSE envelope signed with the publisher's key. It is published beside the archive
(packages/NAME/VERSION/provenance.dsse.json) as a TUF target; setup from a trusted channel checks it
before it installs the archive (signature by the channel's targets keys, subject = the archive).
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import CryptoSigner, Key

from tfaot_dist import __version__
from tfaot_dist.channels.channel import ChannelPackage
from tfaot_dist.errors import IntegrityError

NAME = "provenance.dsse.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT = "https://in-toto.io/Statement/v1"
PREDICATE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://pypi.org/project/tfaot-dist/#build-v1"


def path(row: ChannelPackage) -> str:
    return posixpath.join(posixpath.dirname(row.archive), NAME)


def statement(row: ChannelPackage, manifest: dict[str, Any]) -> dict[str, Any]:
    source = manifest.get("source") if isinstance(manifest.get("source"), dict) else {}
    assert isinstance(source, dict)
    resolved = []
    if source.get("commit") and (source.get("git") or source.get("url")):
        resolved.append(
            {
                "uri": f"git+{source.get('git') or source.get('url')}",
                "digest": {"gitCommit": source["commit"]},
            }
        )
    elif source.get("sha256") and source.get("archive"):
        resolved.append({"uri": source["archive"], "digest": {"sha256": source["sha256"]}})
    compilation = manifest.get("compilation") if isinstance(manifest.get("compilation"), dict) else {}
    assert isinstance(compilation, dict)
    internal = {
        "build_key": manifest.get("build_key") or manifest.get("runtime_key"),
        "toolchain": manifest.get("toolchain"),
        "requires": manifest.get("requires"),
        "cpu_levels": compilation.get("cpu_levels") or manifest.get("cpu_levels"),
        "compiler": manifest.get("compiler"),
    }
    return {
        "_type": STATEMENT,
        "subject": [{"name": posixpath.basename(row.archive), "digest": {"sha256": row.sha256}}],
        "predicateType": PREDICATE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"package": row.name, "version": row.version, "source": source},
                "internalParameters": {k: v for k, v in internal.items() if v},
                "resolvedDependencies": resolved,
            },
            "runDetails": {"builder": {"id": BUILD_TYPE, "version": {"tfaot-dist": __version__}}},
        },
    }


def envelope(row: ChannelPackage, manifest: dict[str, Any], signer: CryptoSigner) -> bytes:
    env = Envelope(json.dumps(statement(row, manifest), sort_keys=True).encode(), PAYLOAD_TYPE, {})
    env.sign(signer)
    return (json.dumps(env.to_dict(), indent=1, sort_keys=True) + "\n").encode()


def names(data: bytes, row: ChannelPackage) -> bool:
    """Whether an envelope's statement names row's archive (signature not checked: the publisher's
    own file, left by a publish that died before listing its row, perhaps of other bytes)."""
    try:
        doc = json.loads(Envelope.from_dict(json.loads(data)).payload)
    except (ValueError, KeyError, TypeError):
        return False
    wanted = [{"name": posixpath.basename(row.archive), "digest": {"sha256": row.sha256}}]
    return isinstance(doc, dict) and doc.get("subject") == wanted


def signed_again(data: bytes, signer: CryptoSigner) -> bytes:
    """The same statement signed by signer alone (a root rotation hands the channel to a new key)."""
    env = Envelope.from_dict(json.loads(data))
    env.signatures = {}
    env.sign(signer)
    return (json.dumps(env.to_dict(), indent=1, sort_keys=True) + "\n").encode()


def check(
    data: bytes,
    keys: list[Key],
    threshold: int,
    row: ChannelPackage,
    where: str,
    whose: str = "the channel's keys",
) -> dict[str, Any]:
    """The statement of a provenance envelope signed by threshold of keys, naming row's archive."""
    try:
        env = Envelope.from_dict(json.loads(data))
        env.verify(keys, threshold)
        doc = json.loads(env.payload)
    except (ValueError, KeyError, TypeError, VerificationError) as exc:
        raise IntegrityError(f"{where}: provenance not signed by {whose} ({exc})") from None
    subjects = doc.get("subject") if isinstance(doc, dict) else None
    wanted = [{"name": posixpath.basename(row.archive), "digest": {"sha256": row.sha256}}]
    if env.payload_type != PAYLOAD_TYPE or doc.get("_type") != STATEMENT or subjects != wanted:
        raise IntegrityError(f"{where}: the provenance does not name {row.archive} with sha256 {row.sha256}")
    return dict(doc)
