"""A static HTML catalogue of a channel, for people: what is in it, and how to use each package.

    CHANNEL/index.html                           every model: latest version, description, TensorFlow,
                                                 batch sizes, size; a search box that filters the rows
    CHANNEL/catalogue.css                        the one style sheet
    CHANNEL/packages/PACKAGE/VERSION/index.html  one page per package version
    CHANNEL/.catalogue.json                      the listing's descriptions, so that a publish reads
                                                 only the manifests of what it adds

The pages are a function of the index rows and the package manifests only
(render()), so any channel that has an index can render them. Everything is
plain HTML and CSS; the only script is inline (the search box, and the
channel's URL in the setup command taken from the page's own address):
nothing is fetched from elsewhere. Every value is HTML-escaped by Jinja2's
autoescape; links are relative paths built from validated names and versions,
or http(s) URLs.

Consistency with index.json (see write()): a version's page depends only on
its own row and manifest, so it never changes once written, and it is written
before the index that lists the version, like its archive. index.html is
written after index.json from the same rows. So every package index.html
lists is in index.json and has its page; a version's page exists before any
listing links to it (a crash in between leaves an unlinked page, as it leaves
an unlisted archive; the next publish writes the same bytes again).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Optional
from urllib.parse import quote, urlsplit

import jinja2
from packaging.version import Version

from tfaot_dist.channels.channel import ChannelPackage
from tfaot_dist.consumer_versions import cmake_version
from tfaot_dist.documents import JsonObject, Manifest, load_json
from tfaot_dist.errors import TfaotError
from tfaot_dist.install.area import AreaWriter
from tfaot_dist.util.render import make_environment
from tfaot_dist.util.textsafe import one_line

INDEX_PAGE = "index.html"
STYLE = "catalogue.css"
DESCRIPTIONS = ".catalogue.json"  # the listing's description of each package's newest version
DESCRIPTIONS_FORMAT = "tfaot-dist-catalogue/1"
FILES = (STYLE, DESCRIPTIONS, INDEX_PAGE)  # what every publish may write beside index.json
CXX_TYPES = {
    "float32": "tfaot::FloatArrays",
    "float64": "tfaot::DoubleArrays",
    "int32": "tfaot::Int32Arrays",
    "int64": "tfaot::Int64Arrays",
    "bool": "tfaot::BoolArrays",
}


def page_path(name: str, version: str) -> str:
    """The page of a package version, relative to the channel (next to its archive)."""
    return f"packages/{name}/{version}/{INDEX_PAGE}"


@dataclass(frozen=True)
class Row:
    """What the listing shows of one package (its newest version)."""

    name: str
    model: str  # NAME of tfaot-model-NAME
    kind: str
    latest: str  # the newest version setup takes for a range (not yanked, unless all are)
    older: tuple[tuple[str, str | None], ...]  # other versions, newest first, each with its yank reason
    yanked: str | None  # latest's yank reason (every version is yanked)
    description: str
    tensorflow: str
    batch_sizes: str
    size: str
    search: str  # lower-case text the search box matches


Key = tuple[str, str]  # (package name, version): ChannelPackage.key
Manifests = Mapping[Key, Optional[Manifest]]
ReadManifest = Callable[[ChannelPackage], Optional[Manifest]]


def render(rows: Iterable[ChannelPackage], manifests: Manifests) -> dict[str, str]:
    """{path relative to the channel: text} for the catalogue of the index rows.

    rows: ChannelPackage values (index.json); manifests: {(name, version): documents.Manifest, or None
    when a published manifest no longer reads}.
    """
    pages = {STYLE: CSS}
    for row in rows:
        pages[page_path(row.name, row.version)] = _version_page(row, manifests.get(row.key))
    pages[INDEX_PAGE] = _index_page(rows, {key: description(m) for key, m in manifests.items()})
    return pages


def pages_to_write(
    channel: AreaWriter, rows: Iterable[ChannelPackage], changed: Iterable[ChannelPackage]
) -> list[ChannelPackage]:
    """The rows whose version page a publish writes: the changed rows and listed rows that have none
    (a channel from before the catalogue). Other pages are never rendered again, so a publish costs
    the same in a channel of any size."""
    fresh = {row.key for row in changed}
    return [
        row for row in rows if row.key in fresh or channel.kind(page_path(row.name, row.version)) != "file"
    ]


def write_pages(
    channel: AreaWriter, pages: Iterable[ChannelPackage], manifests: Manifests, read_manifest: ReadManifest
) -> None:
    """Before index.json (under the publish lock): the style sheet and the pages of pages_to_write().

    channel: the channel directory opened for writing (directory.ChannelWriter: no link followed);
    manifests: {key: Manifest} of the changed rows; read_manifest(row): a listed row's (or None)."""
    channel.write_if_changed(STYLE, CSS)
    for row in pages:
        manifest = manifests[row.key] if row.key in manifests else read_manifest(row)
        channel.write_if_changed(page_path(row.name, row.version), _version_page(row, manifest))


def write_listing(
    channel: AreaWriter, rows: Iterable[ChannelPackage], manifests: Manifests, read_manifest: ReadManifest
) -> None:
    """After index.json: index.html from the same rows. The description of each version shown is
    kept in DESCRIPTIONS, so only the manifests of versions new to the listing are read."""
    kept = _read_descriptions(channel)
    newest = _newest(rows)
    wanted: dict[tuple[str, str], str] = {}
    for row in newest:
        key = f"{row.name} {row.version}"
        if key in kept:
            wanted[row.key] = kept[key]
        else:
            wanted[row.key] = description(manifests[row.key] if row.key in manifests else read_manifest(row))
    text = (
        json.dumps(
            {
                "format": DESCRIPTIONS_FORMAT,
                "descriptions": {f"{n} {v}": d for (n, v), d in sorted(wanted.items())},
            },
            indent=0,
            sort_keys=True,
        )
        + "\n"
    )
    channel.write_if_changed(DESCRIPTIONS, text)
    channel.write_if_changed(INDEX_PAGE, _index_page(rows, wanted))


def description(manifest: Manifest | None) -> str:
    """What the listing shows of a version (its manifest's model.description, one line)."""
    return _text(manifest.text("model", "description")) if manifest else ""


def _read_descriptions(channel: AreaWriter) -> dict[str, str]:
    """The kept descriptions; anything unexpected is ignored (they are made again from manifests)."""
    try:
        data = channel.read(DESCRIPTIONS)
        doc = load_json(data, str(channel.root / DESCRIPTIONS)) if data is not None else None
    except TfaotError:  # a link there is refused when the file is written
        return {}
    found = (
        doc.get("descriptions")
        if isinstance(doc, dict) and doc.get("format") == DESCRIPTIONS_FORMAT
        else None
    )
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def _newest(rows: Iterable[ChannelPackage]) -> list[ChannelPackage]:
    """The version the listing shows of each package (as _index_page chooses it)."""
    by_name: dict[str, list[ChannelPackage]] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    out = []
    for versions in by_name.values():
        taken = [r for r in versions if r.yanked is None] or versions
        out.append(max(taken, key=lambda r: Version(r.version)))
    return out


def _index_page(rows: Iterable[ChannelPackage], descriptions: Mapping[Key, str]) -> str:
    """descriptions: {key: text} of each package's newest version."""
    by_name: dict[str, list[ChannelPackage]] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    listing = []
    for name in sorted(by_name):
        versions = sorted(by_name[name], key=lambda r: Version(r.version), reverse=True)
        newest = next((r for r in versions if r.yanked is None), versions[0])
        text = (
            descriptions.get(newest.key, "")
            if newest.kind == "model"
            else ("XLA runtime library the models link against")
        )
        model = name.removeprefix("tfaot-model-")
        listing.append(
            Row(
                name=name,
                model=model,
                kind=newest.kind,
                latest=newest.version,
                yanked=newest.yanked,
                older=tuple((r.version, r.yanked) for r in versions if r is not newest),
                description=text,
                tensorflow=newest.tensorflow_version,
                batch_sizes=", ".join(map(str, newest.batch_sizes)),
                size=_size(newest.size),
                search=f"{name} {text}".lower(),
            )
        )
    return _template("index").render(
        rows=listing,
        models=sum(r.kind == "model" for r in listing),
        runtimes=sum(r.kind == "runtime" for r in listing),
        style=STYLE,
        page_path=page_path,
    )


def _listed(value: object) -> str:
    """A compilation field as text: lists joined, objects (rewritten_activations) as "KEY VALUE" pairs."""
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items(), key=str))
    return str(value)


def _version_page(row: ChannelPackage, manifest: Manifest | None) -> str:
    manifest = manifest or Manifest(
        package=row.name, version=row.version, files={}
    )  # unreadable: the row alone
    signature = manifest.signature or {}
    inputs = [_tensor(t) for t in _objects(signature.get("inputs"))]
    outputs = [_tensor(t) for t in _objects(signature.get("outputs"))]
    compilation = manifest.compilation.to_json() if manifest.compilation else {}
    source = manifest.source or {}
    model = row.name.removeprefix("tfaot-model-")
    cls = f"{compilation.get('namespace') or 'tfaot_model'}::{compilation.get('class_name') or 'model'}"
    verification = manifest.verification or {}
    order = signature.get("order")
    order = order if isinstance(order, str) else ""
    context = {
        "row": row,
        "model": model,
        "style": STYLE,
        "depth": "../../../",
        "description": _text(manifest.text("model", "description")),
        "author": _text(manifest.text("model", "author")),
        "inputs": inputs,
        "outputs": outputs,
        "order": _text(order[:1].upper() + order[1:]),
        "compilation": {
            k: _text(_listed(v)) for k, v in sorted(compilation.items()) if v not in ("", [], {}, None)
        },
        "verification": {
            "tolerance": verification.get("tolerance"),
            "batch_sizes": ", ".join(map(str, verification.get("batch_sizes", []))),
            "paths": [_text(p) for p in verification.get("paths", [])],
            "outputs": [
                (_text(k), _num(v.get("max_abs")), _num(v.get("max_rel")))
                for k, v in sorted(verification.get("outputs", {}).items())
                if isinstance(v, dict)
            ],
            # multi-level packages: each CPU level run by the verification, or why not
            "cpu_levels": [
                (
                    _text(k),
                    "verified" if v.get("verified") is True else _text(f"not verified: {v.get('note', '')}"),
                )
                for k, v in (verification.get("cpu_levels") or {}).items()
                if isinstance(v, dict)
            ],
        },
        "source": [(_text(k), _text(str(v)), _link(v)) for k, v in sorted(source.items()) if v],
        "digests": [
            ("archive sha256", row.sha256),
            ("archive size", f"{row.size} bytes ({_size(row.size)})"),
            ("manifest sha256", row.manifest_sha256),
        ]
        + [(f"{_text(k)} sha256", _text(str(v))) for k, v in sorted((manifest.digests or {}).items())]
        + ([("build key", _text(manifest.build_key))] if manifest.build_key else []),
        "requires": [f"{_text(r.name)} {_text(r.version)}" for r in row.requires],
        "cmake_version": _text(
            cmake_version(row.version)
        ),  # CMake's form of the version (consumer_versions.py)
        "cpp_class": _text(cls),
        "cpp_call": _cpp_call(cls, inputs, outputs),
    }
    return _template("version").render(**context)


def _objects(value: object) -> list[JsonObject]:
    """The objects of a list in a manifest's free-form signature (anything else left out)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _tensor(t: JsonObject) -> dict[str, str]:
    shape = t.get("shape", [])
    return {
        "name": _text(str(t.get("name", ""))),
        "dtype": _text(str(t.get("dtype", ""))),
        "shape": "[" + ", ".join(["batch", *map(str, shape)]) + "]",
        "cxx": CXX_TYPES.get(str(t.get("dtype", "")), "?"),
    }


def _cpp_call(cls: str, inputs: list[dict[str, str]], outputs: list[dict[str, str]]) -> str:
    """The tfaot::Model call with its argument and result types in positional order."""
    results = ", ".join(o["cxx"] for o in outputs)
    lines = [f"tfaot::Model<{cls}> model;", "const int batchSize = ...;  // rows of every input"]
    lines += [
        f"{i['cxx']} {_ident(i['name'])} = ...;  // input {n}: {i['dtype']} {i['shape']}"
        for n, i in enumerate(inputs)
    ]
    args = ", ".join(["batchSize", *(_ident(i["name"]) for i in inputs)])
    lines.append(f"auto [{', '.join(_ident(o['name']) for o in outputs)}] = model.run<{results}>({args});")
    return _text("\n".join(lines), limit=4000, keep_lines=True)


def _ident(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"v_{out}"


def _text(value: object, limit: int = 2000, keep_lines: bool = False) -> str:
    text = str(value)
    if keep_lines:
        return "\n".join(one_line(line, limit) for line in text.split("\n"))
    return one_line(text, limit)


def _num(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _link(value: object) -> str | None:
    """A URL that may become a link: http(s) only (no javascript:, no file: of the publisher's machine)."""
    if isinstance(value, str) and urlsplit(value).scheme in ("http", "https"):
        return value
    return None


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


@cache
def _template(which: str) -> jinja2.Template:
    """The page templates, compiled once per process (a publish renders many pages)."""
    env = make_environment([], autoescape=True, keep_trailing_newline=False)  # HTML: everything escaped
    env.filters["urlpath"] = lambda p: quote(p, safe="/")
    return env.from_string(INDEX_TEMPLATE if which == "index" else VERSION_TEMPLATE)


CSS = """\
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #1d2330; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.sub { color: #5a6478; margin-top: 0; }
input[type=search] { width: 100%; box-sizing: border-box; font-size: 1rem; padding: .5rem .7rem;
  border: 1px solid #b8c0cc; border-radius: 6px; margin: 1rem 0; }
table { border-collapse: collapse; width: 100%; font-size: .92rem; }
th, td { text-align: left; padding: .4rem .6rem; border-bottom: 1px solid #e1e5eb; vertical-align: top; }
th { background: #f2f4f7; } tr.hidden { display: none; }
td.num { text-align: right; white-space: nowrap; } code, pre { font-family: ui-monospace, monospace; }
pre { background: #f6f8fa; border: 1px solid #e1e5eb; border-radius: 6px; padding: .8rem; overflow-x: auto; }
a { color: #0b5cad; } .older { color: #5a6478; font-size: .85rem; } .tag { font-size: .8rem; color: #5a6478; }
dl { display: grid; grid-template-columns: max-content auto; gap: .3rem 1rem; } dt { font-weight: 600; }
dd { margin: 0; word-break: break-all; } #count { color: #5a6478; font-size: .9rem; }
.yanked { color: #a3261b; } s { text-decoration-thickness: 2px; }
"""

INDEX_TEMPLATE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tfaot-dist channel</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{{ style }}">
</head>
<body>
<h1>AOT compiled TensorFlow models</h1>
<p class="sub">{{ rows | length }} package{{ "s" if rows | length != 1 }} in this channel: {{ models }} model{{ "s" if models != 1 }}{% if runtimes %} and {{ runtimes }} runtime{{ "s" if runtimes != 1 }} they link against{% endif %}. Install a model with
<code>tfaot-dist setup NAME --channel <span class="channel-url">CHANNEL_URL</span> --area $CMSSW_BASE</code>.</p>
<input type="search" id="search" placeholder="Search models by name or description" aria-label="Search models">
<p id="count"></p>
<table id="packages">
<thead><tr><th>Model</th><th>Latest version</th><th>Description</th><th>TensorFlow</th><th>Batch sizes</th><th>Size</th></tr></thead>
<tbody>
{% for r in rows %}
<tr data-search="{{ r.search }}" data-package="{{ r.name }}">
<td><a href="{{ page_path(r.name, r.latest) | urlpath }}">{{ r.name }}</a>{% if r.kind == "runtime" %} <span class="tag">runtime</span>{% endif %}
{% if r.older %}<div class="older">other versions: {% for v, why in r.older %}{% if why %}<s class="yanked" title="yanked: {{ why }}"><a href="{{ page_path(r.name, v) | urlpath }}">{{ v }}</a></s> <span class="yanked">(yanked: {{ why }})</span>{% else %}<a href="{{ page_path(r.name, v) | urlpath }}">{{ v }}</a>{% endif %}{{ ", " if not loop.last }}{% endfor %}</div>{% endif %}</td>
<td>{% if r.yanked %}<s class="yanked">{{ r.latest }}</s> <span class="yanked">(yanked: {{ r.yanked }})</span>{% else %}{{ r.latest }}{% endif %}</td><td>{{ r.description }}</td><td>{{ r.tensorflow }}</td><td>{{ r.batch_sizes }}</td><td class="num">{{ r.size }}</td>
</tr>
{% endfor %}
</tbody>
</table>
<p class="tag">Machine-readable: <a href="index.json">index.json</a>.</p>
<script>
(function () {
  var base = location.href.replace(/[?#].*$/, "").replace(/[^\\/]*$/, "");
  document.querySelectorAll(".channel-url").forEach(function (e) { e.textContent = base; });
  var box = document.getElementById("search"), count = document.getElementById("count");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#packages tbody tr"));
  function filter() {
    var words = box.value.toLowerCase().split(/\\s+/).filter(Boolean), shown = 0;
    rows.forEach(function (r) {
      var hit = words.every(function (w) { return r.dataset.search.indexOf(w) >= 0; });
      r.classList.toggle("hidden", !hit);
      if (hit) { shown++; }
    });
    count.textContent = shown + " of " + rows.length + " packages shown";
  }
  box.addEventListener("input", filter);
  filter();
})();
</script>
</body>
</html>
"""

VERSION_TEMPLATE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ row.name }} {{ row.version }}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{{ depth }}{{ style }}">
</head>
<body>
<p><a href="{{ depth }}index.html">&larr; all models</a></p>
<h1>{{ row.name }} <span class="sub">{% if row.yanked %}<s>{{ row.version }}</s>{% else %}{{ row.version }}{% endif %}</span></h1>
{% if row.yanked %}<p id="yanked" class="yanked"><strong>Yanked:</strong> {{ row.yanked }}. <code>tfaot-dist setup</code> skips this version unless it is pinned exactly (<code>=={{ row.version }}</code>).</p>{% endif %}
{% if description %}<p class="sub" id="description">{{ description }}{% if author %} ({{ author }}){% endif %}</p>{% endif %}

<h2>Install</h2>
{% if row.kind == "model" %}
<pre id="setup">tfaot-dist setup "{{ model }}=={{ row.version }}" --channel <span class="channel-url">CHANNEL_URL</span> --area $CMSSW_BASE</pre>
{% else %}
<p><code>tfaot-dist setup</code> installs the runtime a model was verified with together with the model.</p>
{% endif %}
<p>Archive: <a id="archive" href="{{ row.archive.removeprefix("packages/" ~ row.name ~ "/" ~ row.version ~ "/") | urlpath }}">{{ row.archive.rsplit("/", 1)[-1] }}</a>
({{ digests[1][1] }}), <a href="{{ row.manifest.rsplit("/", 1)[-1] | urlpath }}">manifest.json</a>.
TensorFlow {{ row.tensorflow_version }}.{% if requires %} Requires {{ requires | join(", ") }}.{% endif %}</p>

{% if row.kind == "model" %}
<h2>Signature</h2>
<p>{{ order }}. Pass inputs to <code>run()</code> in this order; results come back in this order.</p>
<table id="signature">
<thead><tr><th>#</th><th>Kind</th><th>Name</th><th>dtype</th><th>Shape</th><th>C++ type</th></tr></thead>
<tbody>
{% for t in inputs %}<tr><td>{{ loop.index0 }}</td><td>input</td><td><code>{{ t.name }}</code></td><td>{{ t.dtype }}</td><td>{{ t.shape }}</td><td><code>{{ t.cxx }}</code></td></tr>
{% endfor %}
{% for t in outputs %}<tr><td>{{ loop.index0 }}</td><td>output</td><td><code>{{ t.name }}</code></td><td>{{ t.dtype }}</td><td>{{ t.shape }}</td><td><code>{{ t.cxx }}</code></td></tr>
{% endfor %}
</tbody>
</table>

<h2>Compilation</h2>
<dl id="compilation">
{% for k, v in compilation.items() %}<dt>{{ k }}</dt><dd>{{ v }}</dd>
{% endfor %}
</dl>

<h2>Verification against TensorFlow</h2>
<p>Batch sizes {{ verification.batch_sizes }}, tolerance {{ verification.tolerance }}{% if verification.paths %}; checked through {{ verification.paths | join("; ") }}{% endif %}.</p>
{% if verification.cpu_levels %}<p id="cpu-levels">CPU levels: {% for level, state in verification.cpu_levels %}{{ level }} {{ state }}{{ "; " if not loop.last }}{% endfor %}.</p>
{% endif %}
<table id="verification">
<thead><tr><th>Output</th><th>max abs error</th><th>max rel error</th></tr></thead>
<tbody>
{% for name, a, r in verification.outputs %}<tr><td><code>{{ name }}</code></td><td class="num">{{ a }}</td><td class="num">{{ r }}</td></tr>
{% endfor %}
</tbody>
</table>

<h2>Use it</h2>
<p>In CMSSW, <code>BuildFile.xml</code>:</p>
<pre id="cmssw">&lt;use name="{{ row.name }}"/&gt;</pre>
<p>With CMake (after <code>setup</code>, <code>CMAKE_PREFIX_PATH=$CMSSW_BASE/tfaot</code>):</p>
<pre id="cmake">find_package({{ row.name }} {{ cmake_version }} REQUIRED)
target_link_libraries(my_program PRIVATE tfaot::model-{{ model }})</pre>
<p>With pkg-config: <code>pkg-config --cflags --libs {{ row.name }}</code>. In C++:</p>
<pre id="cpp">#include "tfaot/Model.h"
#include "{{ row.name }}/model.h"

{{ cpp_call }}</pre>
{% endif %}

<h2>Source</h2>
<dl id="source">
{% for k, v, link in source %}<dt>{{ k }}</dt><dd>{% if link %}<a href="{{ link }}">{{ v }}</a>{% else %}<code>{{ v }}</code>{% endif %}</dd>
{% endfor %}
</dl>

<h2>Digests</h2>
<dl id="digests">
{% for k, v in digests %}<dt>{{ k }}</dt><dd><code>{{ v }}</code></dd>
{% endfor %}
</dl>
<script>
(function () {
  var base = new URL("{{ depth }}", location.href).href;
  document.querySelectorAll(".channel-url").forEach(function (e) { e.textContent = base; });
})();
</script>
</body>
</html>
"""
