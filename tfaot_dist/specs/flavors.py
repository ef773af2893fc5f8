"""Specs rendered from the registry: cmsBuild specs for CMSDIST, or standard rpm specs.

    tfaot-dist specs --out specs/                                 cmsBuild flavour (default)
    tfaot-dist specs --flavor rpm --out rpm-specs/ --sources dist/
    tfaot-dist specs --out specs/ --check                         exit 1 and list stale files

cmsBuild flavour (CMSDIST conventions):
    tfaot-model-NAME.spec       one per entry: `### RPM external`, the git Source
                                at the pinned commit, aot_config, `## INCLUDE tfaot-compile`
    tfaot-compile.file          shared: build with `tfaot-dist compile` against the release's python3,
                                TensorFlow and tensorflow-xla-runtime (the tool the models' tool files
                                use), install every file
    tfaot-models.file           one `Requires:` per model
    pip/tfaot-dist.file         the tool itself, as cmsdist's py3-tfaot-dist

cmsbuild-prebuilt flavour (--channel URL): nothing is compiled; each spec installs the package
archive that `tfaot-dist build` verified and `publish` put in the channel:
    tfaot-model-NAME.spec       `Source:` the archive's URL in the channel, its sha256 from the
                                channel index, `Requires: tfaot-xla-runtime`, `## INCLUDE tfaot-prebuilt`
    tfaot-xla-runtime.spec      the runtime archive the models were verified with, from the same channel
    tfaot-prebuilt.file         shared: %prep checks the sha256 before unpacking, %install copies the
                                tree into %{i} with the scram tool file in etc/scram.d/%{n}.xml
    tfaot-models.file           one `Requires:` per model
The channel's package of each entry must be the build of that entry (its manifest's source and
aot_config equal the entry's, its TensorFlow the registry's pin).

rpm flavour: tfaot-model-NAME.spec and tfaot-xla-runtime.spec, standard specs
whose Source0 is the verified package archive of `tfaot-dist build`; with
--sources DIST the archives are checked against their manifests and the
registry and copied into OUT/SOURCES/, ready for
`rpmbuild -bb --define "_sourcedir OUT/SOURCES" OUT/NAME.spec`.

Version is the entry's version, Release comes from the registry's git
history (release.py). Rendering is a pure function of the registry, its
history and the templates: the same inputs give the same bytes. Everything
is validated and rendered in memory before the first file is written, and
each file is written atomically, so an error leaves the output as it was.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from tfaot_dist import __version__, consumer_versions, names
from tfaot_dist.build_key import build_key
from tfaot_dist.channels.channel import INDEX, Channel, ChannelPackage, verify_archive
from tfaot_dist.channels.factory import open_channel
from tfaot_dist.cxx.scram_tool import RUNTIME_TOOL
from tfaot_dist.documents import Manifest, load_json
from tfaot_dist.errors import IntegrityError, InvalidInput, SourceUnavailable, UsageError
from tfaot_dist.pins import ArchiveSource, GitSource, check_url
from tfaot_dist.registry import DEFAULT_REQUIREMENTS, Defaults, ModelEntry, Registry
from tfaot_dist.specs import release
from tfaot_dist.util import yamlio
from tfaot_dist.util.fs import copy_atomic, sha256_file, write_atomic
from tfaot_dist.util.progress import Log
from tfaot_dist.util.render import spec_templates_dir
from tfaot_dist.util.textsafe import render, spec_text

PREBUILT = "cmsbuild-prebuilt"
FLAVORS = ("cmsbuild", "rpm", PREBUILT)
# CMSDIST's runtime package of the release: what the cmsBuild flavour's models build against and use,
# never a spec of ours.
RELEASE_RUNTIME = names.RELEASE_RUNTIME_PACKAGE
# runtime_package.NAME, the runtime spec of every flavour; its scram tool file is etc/scram.d/%{n}.xml
RPM_RUNTIME = RUNTIME_TOOL
TOOL_PACKAGE = (
    "py3-tfaot-dist"  # cmsdist builds pip/NAME.file as py3-NAME (as pip/cms-tfaot.file: py3-cms-tfaot)
)
TOOL_PIP_FILE = "pip/tfaot-dist.file"
# The tool's dependencies (pyproject.toml) as cmsdist names their pip/NAME.file packages.
TOOL_REQUIRES = (
    "py3-GitPython",
    "py3-Jinja2",
    "py3-PyYAML",
    "py3-cyclonedx-python-lib",
    "py3-packaging",
    "py3-requests",
    "py3-securesystemslib",
    "py3-tuf",
)
TOOL_PYTHON = (3, 9)  # pyproject's requires-python
# The release's Python and TensorFlow: cmsdist's python3 and py3-tensorflow (found through PYTHON3PATH).
RELEASE_TENSORFLOW = "py3-tensorflow"
TENSORFLOW_DISTS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel")
SOURCES = "SOURCES"

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

Context = dict[str, Any]  # a spec template's variables
Rows = dict[tuple[str, str], ChannelPackage]  # a channel's index by (package, version)


@dataclass
class SpecsResult:
    flavor: str
    out: Path
    check: bool
    written: list[str] = field(default_factory=list)  # relative to out
    unchanged: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # --check: files that differ from a fresh rendering
    sources: list[str] = field(default_factory=list)  # archives placed in (or checked against) SOURCES/
    missing_sources: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "out": str(self.out),
            "check": self.check,
            "written": self.written,
            "unchanged": self.unchanged,
            "stale": self.stale,
            "sources": self.sources,
            "missing_sources": self.missing_sources,
        }


def generate(
    registry: Registry,
    flavor: str,
    out: Path,
    check: bool = False,
    sources: Path | None = None,
    log: Log = print,
    channel: str | None = None,
) -> SpecsResult:
    """Render every spec of the registry into out (or, with check, compare out with a fresh rendering)."""
    if flavor not in FLAVORS:
        raise UsageError(f"--flavor: expected one of {', '.join(FLAVORS)}, got {flavor!r}")
    if sources is not None and flavor != "rpm":
        raise UsageError("--sources: only the rpm flavour builds from package archives")
    if (channel is not None) != (flavor == PREBUILT):
        raise UsageError(
            f"--channel: the {PREBUILT} flavour needs it (the http(s) URL of a channel), the others take none"
        )
    files = render_all(registry, flavor, channel)
    archives = _collect_sources(registry, sources, log) if sources is not None else {}
    result = SpecsResult(flavor, out, check)
    result.missing_sources = sorted(name for name, archive in archives.items() if archive is None)

    wanted = {rel: text.encode() for rel, text in files.items()}
    for rel in sorted(wanted):
        target = out / rel
        same = target.is_file() and target.read_bytes() == wanted[rel]
        if same:
            result.unchanged.append(rel)
        elif check:
            result.stale.append(rel)
        else:
            write_atomic(target, wanted[rel])
            result.written.append(rel)
    for name, archive in sorted(archives.items()):
        if archive is None:
            continue
        rel = f"{SOURCES}/{name}"
        result.sources.append(rel)
        target = out / rel
        if target.is_file() and sha256_file(target) == sha256_file(archive):
            result.unchanged.append(rel)
        elif check:
            result.stale.append(rel)
        else:
            copy_atomic(archive, target)
            result.written.append(rel)
    return result


def render_all(registry: Registry, flavor: str, channel: str | None = None) -> dict[str, str]:
    """Every file of the flavour, relative path -> text. Raises InvalidInput before anything is written.

    channel: the cmsbuild-prebuilt flavour's channel URL (its index and manifests are read).
    """
    if not (registry.root / "registry.yaml").is_file() and not registry.models_dir.is_dir():
        raise InvalidInput(f"{registry.root}: not a registry (no registry.yaml and no models/)")
    defaults = registry.defaults()
    tf_version = tensorflow_version(defaults, registry.root / "registry.yaml")
    for path in sorted(registry.models_dir.glob("*.yaml")):
        # Registry.load names only the bad name; say which file holds it (quoted if unprintable).
        shown = path if path.name.isprintable() else f"{path.parent}/{path.name!r}"
        names.model_name(path.stem, f"{shown}: name")
    entries = registry.load_all()
    models = [_model_context(registry, e, defaults, tf_version, flavor) for e in entries]
    runtime = _runtime_context(registry, defaults, tf_version)
    common = {"tfaot_dist_version": __version__}
    files = {}
    if flavor == "cmsbuild":
        for m in models:
            files[f"{m['package']}.spec"] = render("cmsbuild_model.spec.j2", **common, m=m)
        files["tfaot-compile.file"] = render(
            "tfaot-compile.file.j2",
            **common,
            r=runtime,
            tool_package=TOOL_PACKAGE,
            runtime_package=RELEASE_RUNTIME,
            tensorflow_package=RELEASE_TENSORFLOW,
            runtime_root_variable=_root_variable(RELEASE_RUNTIME),
        )
        files["tfaot-models.file"] = render("tfaot-models.file.j2", **common, models=models)
        files[TOOL_PIP_FILE] = render(
            "tfaot-dist.pip.file.j2",
            **common,
            requires=TOOL_REQUIRES,
            python=".".join(map(str, TOOL_PYTHON)),
            python_tuple=TOOL_PYTHON,
        )
    elif flavor == PREBUILT:
        if channel is None:
            raise UsageError(f"--channel: the {PREBUILT} flavour needs the http(s) URL of a channel")
        base, rows, opened = _read_channel(channel)
        prebuilt = [_prebuilt_model(base, rows, opened, e, m, tf_version) for e, m in zip(entries, models)]
        for p in prebuilt:
            files[f"{p['package']}.spec"] = render(
                "cmsbuild_prebuilt.spec.j2", **common, p=p, channel=base, runtime_package=RPM_RUNTIME
            )
        if prebuilt:
            p = _prebuilt_runtime(base, rows, prebuilt, runtime)
            files[f"{RPM_RUNTIME}.spec"] = render(
                "cmsbuild_prebuilt.spec.j2", **common, p=p, channel=base, runtime_package=RPM_RUNTIME
            )
        files["tfaot-prebuilt.file"] = render("tfaot-prebuilt.file.j2", **common)
        files["tfaot-models.file"] = render("tfaot-models.file.j2", **common, models=models)
    else:
        for m in models:
            files[f"{m['package']}.spec"] = render(
                "rpm_model.spec.j2", **common, m=m, runtime_package=RPM_RUNTIME
            )
        files[f"{RPM_RUNTIME}.spec"] = render(
            "rpm_runtime.spec.j2", **common, r=runtime, runtime_package=RPM_RUNTIME
        )
    return files


# --- values ---------------------------------------------------------------------------------------


def spec_value(value: object, where: str) -> str:
    """An identifier for a spec line: rejected unless every character is harmless there."""
    if not isinstance(value, str) or not names.SPEC_VALUE.fullmatch(value):
        raise InvalidInput(
            f"{where}: {value!r} cannot be placed in a spec (allowed: letters, digits and ._~:/@+,=-)"
        )
    return value


def spec_url(url: str, where: str) -> str:
    """The git URL as a URL (scp-like and plain paths rewritten), checked for spec-safe characters."""
    if names.SPEC_SCHEME_URL.fullmatch(url):
        return url
    if names.SPEC_ABSOLUTE_PATH.fullmatch(url):
        return f"file://{url}"
    if m := names.SPEC_SCP_URL.fullmatch(url):
        return f"ssh://{m.group(1)}/{m.group(2).lstrip('/')}"
    raise InvalidInput(
        f"{where}: git URL {url!r} cannot be placed in a spec "
        f"(use scheme://host/path with letters, digits and ._~:/@+- only)"
    )


def rpm_version(version: str, where: str) -> str:
    """A PEP 440 version as an rpm Version that sorts the same way (consumer_versions.rpm_version)."""
    v = Version(names.version(version, where))
    if v.epoch:
        raise InvalidInput(f"{where}: version {version!r} has an epoch, which specs cannot carry")
    return spec_value(consumer_versions.rpm_version(version), where)


def tensorflow_version(defaults: Defaults, where: Path) -> str:
    """The TensorFlow version the registry pins (e.g. tensorflow-cpu==2.21.0): the runtime's version."""
    found = []
    for text in defaults.requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name.lower() in TENSORFLOW_DISTS:
            pins = [s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
            found.extend(pins)
            if not pins:
                raise InvalidInput(
                    f"{where}: toolchain.requirements: {text!r}: specs need TensorFlow "
                    f"pinned to one version with =="
                )
    if len(found) != 1:
        raise InvalidInput(
            f"{where}: toolchain.requirements: specs need exactly one pinned TensorFlow "
            f"requirement (one of {', '.join(TENSORFLOW_DISTS)}), found {len(found)}"
        )
    return rpm_version(str(Version(found[0])), f"{where}: toolchain.requirements")


def _entry_version(text: str | None) -> str | None:
    try:  # old registry text from git history: bounded like any registry file
        data = yamlio.load_text(text, "registry history") if text is not None else None
    except InvalidInput:
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return version if isinstance(version, str) else None


def _registry_tf_version(text: str | None) -> str | None:
    try:
        data = yamlio.load_text(text, "registry history") if text is not None else {}
        reqs = data.get("toolchain", {}).get("requirements", list(DEFAULT_REQUIREMENTS))
        return tensorflow_version(Defaults(requirements=tuple(reqs)), Path("registry.yaml"))
    except (AttributeError, TypeError, InvalidInput):  # unreadable: ends the walk
        return None


def _templates() -> list[Path]:
    """The templates whose changes count in a spec's Release: the spec templates, not the package
    templates (a changed package template changes the build key, hence the package's version)."""
    return [spec_templates_dir()]


def _changelog(rel: release.Release, version: str) -> list[Context]:
    out = []
    for change in rel.changes:
        t = time.gmtime(change.time)
        email = change.email if names.EMAIL.fullmatch(change.email) else "unknown@invalid"
        author = spec_text(change.author.replace("<", "").replace(">", ""), 80) or "unknown"
        out.append(
            {
                "date": f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} {t.tm_year}",
                "author": author,
                "email": email,
                "evr": f"{version}-{change.release}",
                "text": spec_text(change.subject) or "(no subject)",
                "commit": change.commit[:12],
            }
        )
    return out


def _model_context(
    registry: Registry, entry: ModelEntry, defaults: Defaults, tf_version: str, flavor: str
) -> Context:
    path = entry.path or registry.entry_path(entry.name)
    where = str(path)
    version = spec_value(entry.version, f"{where}: version")
    rpmv = rpm_version(entry.version, f"{where}: version")
    source = _source_context(entry.source, where, flavor)
    batch_sizes = ""
    for key, value in entry.overrides.items():
        if key == "batch_sizes":
            batch_sizes = ",".join(str(int(bs)) for bs in value)
        elif flavor == "cmsbuild":
            # `tfaot-dist compile` takes the batch sizes only; a silently dropped override would change the bytes.
            raise InvalidInput(
                f"{where}: overrides.{key}: the cmsBuild flavour can only pass batch_sizes "
                f"to `tfaot-dist compile`"
            )
    rel = release.derive(
        path, [registry.root / "registry.yaml", *_templates()], entry.version, _entry_version
    )
    arch = defaults.target_triple.split("-", 1)[0]
    return {
        "name": spec_value(entry.name, f"{where}: name"),
        "package": spec_value(entry.package, f"{where}: name"),
        "version": version,
        "rpm_version": rpmv,
        "release": rel.number,
        "changelog": _changelog(rel, rpmv),
        **source,
        "aot_config": spec_value(entry.aot_config, f"{where}: aot_config"),
        "batch_sizes": batch_sizes,
        "entry_file": spec_value(f"models/{path.name}", f"{where}: name"),
        "arch": spec_value(arch, f"{registry.root / 'registry.yaml'}: target_triple"),
        "tf_version": tf_version,
    }


def _source_context(source: GitSource | ArchiveSource, where: str, flavor: str) -> Context:
    """git: URL, ref, branch and commit (or the release's data package for a CMSDATA repository);
    archive (http, pinned by sha256): URL and digest."""
    if isinstance(source, GitSource):
        context = {
            "kind": "git",
            "url": spec_url(source.url, f"{where}: source.git"),
            "ref": spec_value(source.ref, f"{where}: source.ref"),
            "commit": spec_value(source.commit, f"{where}: source.commit"),
        }
        if data := names.CMS_DATA_URL.fullmatch(source.url):
            repo = data.group(1)
            return {
                **context,
                "kind": "cms-data",
                "data_package": f"data-{repo}",
                "data_dir": f"${{{_root_variable('data-' + repo)}}}/{repo.replace('-', '/')}/data",
            }
        if flavor == "cmsbuild":
            context["branch"] = spec_value(_branch(source, where), f"{where}: source.branch")
        return context
    url = source.url
    if not url.startswith(("https://", "http://")) or not names.SPEC_SCHEME_URL.fullmatch(url):
        raise InvalidInput(
            f"{where}: source.archive: URL {url!r} cannot be placed in a spec "
            f"(use http(s)://host/path with letters, digits and ._~:/@+- only)"
        )
    return {"kind": "archive", "url": url, "sha256": spec_value(source.sha256, f"{where}: source.sha256")}


def _branch(source: GitSource, where: str) -> str:
    """The branch cmsBuild's git download pulls before it resets to the commit: source.branch, else
    the ref when it names a branch. A tag cannot be told from a branch by its name: give source.branch."""
    if source.branch:
        return source.branch
    ref = source.ref.removeprefix("refs/heads/")
    if ref.startswith("refs/") or ref == "HEAD" or names.COMMIT_LIKE.fullmatch(ref):
        raise InvalidInput(
            f"{where}: source.ref {source.ref!r} is not a branch, and cmsBuild's git download "
            f"pulls a branch, then resets to the commit: add source.branch (a branch that "
            f"contains {source.commit})"
        )
    return ref


def _root_variable(package: str) -> str:
    """The environment variable cmsBuild sets to a dependency's install root (data-build-github.file's
    %post: the name upper-cased, '-' -> '_', then _ROOT)."""
    return package.upper().replace("-", "_") + "_ROOT"


def _runtime_context(registry: Registry, defaults: Defaults, tf_version: str) -> Context:
    where = registry.root / "registry.yaml"
    for req in defaults.requirements:
        if not names.REQUIREMENT_CHARS.fullmatch(req) or any(c in req for c in "%$`'\"\\"):
            raise InvalidInput(f"{where}: toolchain.requirements: {req!r} cannot be placed in a spec")
    rel = release.derive(where, _templates(), tf_version, _registry_tf_version)
    # The registry defaults the cmsBuild build writes for `tfaot-dist compile` (JSON is YAML).
    registry_yaml = json.dumps(
        {
            "toolchain": {"requirements": list(defaults.requirements)},
            "target_triple": defaults.target_triple,
            "target_cpu": defaults.target_cpu,
            "cpu_levels": list(defaults.cpu_levels),
        },
        sort_keys=True,
    )
    # In cmsBuild the triple is the build machine's (%{_arch}), set by tfaot-compile.file.
    registry_yaml_for_arch = json.dumps(
        {**json.loads(registry_yaml), "target_triple": "%{tfaot_target_triple}"}, sort_keys=True
    )
    arch = defaults.target_triple.split("-", 1)[0]
    return {
        "tf_version": tf_version,
        "registry_yaml_for_arch": registry_yaml_for_arch,
        "release": rel.number,
        "changelog": _changelog(rel, tf_version),
        "registry_yaml": registry_yaml,
        "arch": spec_value(arch, f"{where}: target_triple"),
    }


# --- the channel (cmsbuild-prebuilt flavour) -----------------------------------------------------


def _read_channel(url: str) -> tuple[str, dict[tuple[str, str], ChannelPackage], Channel]:
    """The channel's base URL (ending in /), its index rows by (name, version), and the channel."""
    base = check_url(url, "--channel")
    base = base if base.endswith("/") else base + "/"
    if not names.SPEC_SCHEME_URL.fullmatch(base):
        raise InvalidInput(
            f"--channel: URL {url!r} cannot be placed in a spec "
            f"(use http(s)://host/path with letters, digits and ._~:/@+- only)"
        )
    channel = open_channel(base, Path(tempfile.gettempdir()))  # read online: nothing is cached
    for broken in channel.index.broken:  # the specs are made from the whole channel
        raise broken.refusal()
    return base, {row.key: row for row in channel.index.rows}, channel


def _archive_url(base: str, row: ChannelPackage) -> str:
    """Where cmsBuild downloads the archive from; its file name is the one %{SOURCE0} and %setup expect."""
    url = base + row.archive
    if not row.archive.endswith(f"/{row.name}-{row.version}.tar.gz") or not names.SPEC_SCHEME_URL.fullmatch(
        url
    ):
        raise InvalidInput(
            f"{base}{INDEX}: {row.name} {row.version}: archive {row.archive!r} cannot be placed "
            f"in a spec (expected .../{row.name}-{row.version}.tar.gz, letters, digits and "
            f"._~:/@+- only)"
        )
    return url


def _prebuilt_model(
    base: str, rows: Rows, channel: Channel, entry: ModelEntry, m: Context, tf_version: str
) -> Context:
    """The model context plus the channel's archive of exactly this entry's build."""
    index = base + INDEX
    row = rows.get((entry.package, entry.version))
    if row is None:
        raise SourceUnavailable(
            f"{index}: no {entry.package} {entry.version} (the entry {m['entry_file']}); "
            f"build and publish it first"
        )
    manifest_url = base + row.manifest
    data = channel.manifest_bytes(row)  # checked against the index's manifest_sha256
    manifest = Manifest.from_json(load_json(data, manifest_url), manifest_url)
    wanted = {**entry.source.as_dict(), "url": entry.source.url, "aot_config": entry.aot_config}
    if differ := sorted(k for k in wanted if manifest.text("source", k) != wanted[k]):
        raise InvalidInput(
            f"{manifest_url}: not the build of {m['entry_file']} (source.{', source.'.join(differ)} "
            f"differ); build and publish a new version"
        )
    if rpm_version(row.tensorflow_version or "0", index) != tf_version:
        raise InvalidInput(
            f"{manifest_url}: compiled with TensorFlow {row.tensorflow_version!r}, "
            f"the registry pins {tf_version}"
        )
    runtimes = sorted({r.version for r in row.requires if r.name == RPM_RUNTIME})
    if len(runtimes) != 1:
        raise InvalidInput(
            f"{index}: {row.name} {row.version}: expected one {RPM_RUNTIME} requirement, "
            f"found {len(runtimes)}"
        )
    return {
        **m,
        "url": _archive_url(base, row),
        "sha256": row.sha256,
        "runtime_version": runtimes[0],
        "origin": f"the registry entry {m['entry_file']}",
        "requires_runtime": True,
    }


def _prebuilt_runtime(base: str, rows: Rows, models: list[Context], runtime: Context) -> Context:
    """The one runtime build every model of the channel was verified with."""
    versions = sorted({m["runtime_version"] for m in models})
    if len(versions) != 1:
        raise InvalidInput(
            f"{base}{INDEX}: the models were verified with different runtimes "
            f"({', '.join(versions)}); rebuild and publish them on one machine"
        )
    row = rows.get((RPM_RUNTIME, versions[0]))
    if row is None:
        raise SourceUnavailable(f"{base}{INDEX}: no {RPM_RUNTIME} {versions[0]}, which the models require")
    return {
        "package": RPM_RUNTIME,
        "version": spec_value(row.version, f"{base}{INDEX}: {RPM_RUNTIME} version"),
        "release": runtime["release"],
        "url": _archive_url(base, row),
        "sha256": row.sha256,
        "origin": "the registry",
        "requires_runtime": False,
    }


# --- sources (rpm flavour) -----------------------------------------------------------------------


def _collect_sources(registry: Registry, dist: Path, log: Log) -> dict[str, Path | None]:
    """SOURCES name -> verified archive in dist (None: the runtime archive is not there)."""
    defaults = registry.defaults()
    tf_version = tensorflow_version(defaults, registry.root / "registry.yaml")
    out: dict[str, Path | None] = {}
    runtime_versions = set()
    for entry in registry.load_all():
        name = f"{entry.package}-{entry.version}.tar.gz"
        archive = dist / name
        if not archive.is_file():
            raise SourceUnavailable(
                f"{archive}: package archive not found; run `tfaot-dist build --all --dist {dist}` first"
            )
        verified = verify_archive(archive)
        if (verified.name, verified.version) != (entry.package, entry.version):
            raise IntegrityError(f"{archive}: holds {verified.name} {verified.version}")
        manifest = verified.manifest
        key = build_key(entry, defaults)
        if manifest.build_key != key:
            raise InvalidInput(
                f"{archive}: built from another state of {entry.path} (build key differs); "
                f"run `tfaot-dist build --all --dist {dist}` first"
            )
        out[name] = archive
        runtime_versions |= {r.version for r in manifest.requires if r.name == RPM_RUNTIME}

    runtime_name = f"{RPM_RUNTIME}-{tf_version}.tar.gz"
    if len(runtime_versions) > 1:
        raise InvalidInput(
            f"{dist}: the packages were verified with different runtimes "
            f"({', '.join(sorted(runtime_versions))}); rebuild them on one machine"
        )
    candidates = (
        [dist / f"{RPM_RUNTIME}-{v}.tar.gz" for v in runtime_versions]
        if runtime_versions
        else sorted(dist.glob(f"{RPM_RUNTIME}-{tf_version}.tar.gz"))
        + sorted(dist.glob(f"{RPM_RUNTIME}-{tf_version}+*.tar.gz"))
    )
    candidates = [c for c in candidates if c.is_file()]
    if len(candidates) == 1:
        archive = candidates[0]
        version = archive.name.removeprefix(f"{RPM_RUNTIME}-").removesuffix(".tar.gz")
        if version != tf_version and not version.startswith(f"{tf_version}+"):
            raise InvalidInput(
                f"{archive}: runtime for TensorFlow {version}, but the registry pins {tf_version}"
            )
        if verify_archive(archive).name != RPM_RUNTIME:
            raise IntegrityError(f"{archive}: not a {RPM_RUNTIME} package")
        out[runtime_name] = archive
    else:
        log(f"no single {RPM_RUNTIME} {tf_version} archive in {dist}: {runtime_name} not placed")
        out[runtime_name] = None
    return out
