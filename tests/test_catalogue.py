"""The channel's HTML catalogue: written by publish, escaped, consistent with index.json, and
checked in a real headless Chromium loading it over HTTP from 127.0.0.1."""

from __future__ import annotations

import json
import urllib.request
from contextlib import closing
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from browser import Browser
from conftest import Cli
from httpserve import Server

from tfaot_dist.channels import catalogue
from tfaot_dist.channels.channel import RUNTIME, ChannelPackage, parse_index
from tfaot_dist.documents import Manifest
from tfaot_dist.toolchain import Toolchain

MODELS = ("tfaot-model-test-multi", "tfaot-model-test-simple")


@pytest.fixture
def published(built: Path, tmp_path: Path, run: Cli) -> Path:
    ch = tmp_path / "channel"
    run("publish", "--channel", ch, "--dist", built / "dist")
    return ch


Key = tuple[str, str]  # (package, version)


def rows_and_manifests(ch: Path) -> tuple[list[ChannelPackage], dict[Key, dict[str, Any]]]:
    rows = parse_index((ch / "index.json").read_bytes(), "index.json")
    return rows, {r.key: json.loads((ch / r.manifest).read_bytes()) for r in rows}


def typed(manifests: dict[Key, dict[str, Any]]) -> dict[Key, Manifest | None]:
    """The manifests as the catalogue reads them (documents.Manifest)."""
    return {key: Manifest.from_json(m, "manifest.json") for key, m in manifests.items()}


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []  # "" for an href without a value
        self.scripts_src: list[str | None] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        if "href" in a:
            self.hrefs.append(a["href"] or "")
        if tag in ("script", "img", "iframe") and "src" in a:
            self.scripts_src.append(a["src"])


def test_publish_writes_a_page_per_listed_version_and_nothing_else(published: Path) -> None:
    rows, manifests = rows_and_manifests(published)
    assert {r.name for r in rows} == {*MODELS, RUNTIME}
    pages = sorted(p.relative_to(published).as_posix() for p in published.rglob("index.html"))
    assert pages == sorted(["index.html", *(catalogue.page_path(r.name, r.version) for r in rows)])
    # The catalogue is a function of the index rows and manifests: rendering again gives the bytes on disk.
    for rel, text in catalogue.render(rows, typed(manifests)).items():
        assert (published / rel).read_text() == text, rel
    page = (published / catalogue.page_path("tfaot-model-test-multi", "1.0.0")).read_text()
    m = manifests[("tfaot-model-test-multi", "1.0.0")]
    for needle in (
        m["source"]["commit"],
        rows[0].sha256 if rows[0].name == "tfaot-model-test-multi" else "",
        '&lt;use name="tfaot-model-test-multi"/&gt;',
        "find_package(tfaot-model-test-multi 1.0.0",
        "tfaot::Model&lt;tfaot_model::multi&gt;",
        "model.run&lt;tfaot::FloatArrays, tfaot::BoolArrays&gt;(batchSize, input_0, input_1)",
    ):
        assert needle in page, needle
    # Nothing external: no absolute URL in src or href except the index's own relative links.
    for rel in pages:
        parser = Links()
        parser.feed((published / rel).read_text())
        assert parser.scripts_src == [], rel
        assert all("://" not in h for h in parser.hrefs), (rel, parser.hrefs)


def test_a_second_publish_changes_nothing_and_an_old_channel_gets_its_catalogue(
    built: Path, published: Path, run: Cli
) -> None:
    before = {p: p.read_bytes() for p in published.rglob("*") if p.is_file()}
    run("publish", "--channel", published, "--dist", built / "dist")
    after = {p: p.read_bytes() for p in published.rglob("*") if p.is_file()}
    assert after == before
    for page in published.rglob("*.html"):
        page.unlink()  # a channel published before the catalogue existed
    (published / catalogue.STYLE).unlink()
    run("publish", "--channel", published, "--dist", built / "dist")
    assert {p: p.read_bytes() for p in published.rglob("*") if p.is_file()} == before


def test_crash_between_index_json_and_index_html(built: Path, tmp_path: Path, cache: Path) -> None:
    """Listed implies paged; index.html never lists a package index.json does not."""
    from test_crashes import crashed, finish, split_dist

    simple, _ = split_dist(built, tmp_path)
    ch = tmp_path / "channel"
    finish(cache, "publish", "--channel", ch, "--dist", simple)
    old_html = (ch / "index.html").read_text()
    assert "tfaot-model-test-multi" not in old_html
    crashed(cache, "publish_catalogue", "publish", "--channel", ch, "--dist", built / "dist")
    rows, _ = rows_and_manifests(ch)
    assert {r.name for r in rows} == {*MODELS, RUNTIME}  # index.json has it, and its page exists
    assert all((ch / catalogue.page_path(r.name, r.version)).is_file() for r in rows)
    assert (ch / "index.html").read_text() == old_html  # the listing is the older subset
    crashed(cache, "publish_index", "publish", "--channel", tmp_path / "c2", "--dist", built / "dist")
    assert not (tmp_path / "c2" / "index.json").exists() and not (tmp_path / "c2" / "index.html").exists()
    finish(cache, "publish", "--channel", ch, "--dist", built / "dist")
    assert "tfaot-model-test-multi" in (ch / "index.html").read_text()


def test_compilation_fields_as_text(published: Path) -> None:
    """Lists joined, objects as "KEY VALUE" pairs (the Selu and Elu nodes given TensorFlow's formula)."""
    rows, manifests = rows_and_manifests(published)
    key = ("tfaot-model-test-simple", "1.0.0")
    manifest = dict(manifests[key])
    manifest["compilation"] = {
        **manifest["compilation"],
        "activation_formulas": "tensorflow",
        "rewritten_activations": {"Selu": 12, "Elu": 2},
    }
    page = catalogue.render(rows, typed({**manifests, key: manifest}))[catalogue.page_path(*key)]
    assert "<dt>rewritten_activations</dt><dd>Elu 2, Selu 12</dd>" in page
    assert "<dt>activation_formulas</dt><dd>tensorflow</dd>" in page
    assert (
        f"<dt>batch_sizes</dt><dd>{', '.join(map(str, manifest['compilation']['batch_sizes']))}</dd>" in page
    )


def test_everything_is_escaped(published: Path) -> None:
    rows, manifests = rows_and_manifests(published)
    key = ("tfaot-model-test-simple", "1.0.0")
    evil = dict(manifests[key])
    evil["model"] = {
        "description": '<script>alert("x")</script> & "quotes" <b>',
        "author": "<img src=x onerror=1>",
    }
    evil["source"] = {
        "git": "javascript:alert(1)",
        "commit": '"><script>1</script>',
        "url": "https://h/a?b=<c>&d",
    }
    evil["signature"] = {
        "inputs": [{"name": "<in>", "dtype": "float32", "shape": [4]}],
        "outputs": [{"name": 'o"ut', "dtype": "bool", "shape": [2]}],
        "order": "<o>",
    }
    pages = catalogue.render(rows, typed({**manifests, key: evil}))
    for text in (pages["index.html"], pages[catalogue.page_path(*key)]):
        assert "<script>alert" not in text and "<img" not in text and "<b>" not in text and "<in>" not in text
        parser = Links()
        parser.feed(text)
        assert parser.tags.count("script") == 1  # only the page's own inline script
        assert not any(h.startswith("javascript:") for h in parser.hrefs)
    page = pages[catalogue.page_path(*key)]
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#34;quotes&#34;" in pages["index.html"]
    assert 'href="https://h/a?b=&lt;c&gt;&amp;d"' in page
    assert "<code>javascript:alert(1)</code>" in page  # shown, never a link


def test_catalogue_in_headless_chromium(published: Path, tmp_path: Path) -> None:
    screenshot = tmp_path / "catalogue.png"  # kept with the test's files: what the page looked like
    rows, manifests = rows_and_manifests(published)
    with closing(Server(published)) as server, Browser() as browser:
        browser.open(server.url("index.html"))
        listed = browser.eval(
            "[...document.querySelectorAll('#packages tbody tr')].map(r => r.dataset.package)"
        )
        assert sorted(listed) == sorted({r.name for r in rows})
        assert browser.eval("getComputedStyle(document.body).fontFamily").startswith(
            "system-ui"
        )  # CSS loaded
        setup = browser.eval("document.querySelector('.channel-url').textContent")
        assert setup == server.url("")
        browser.screenshot(screenshot)
        assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        def visible(query: str) -> list[str]:
            shown: list[str] = browser.eval(
                "(() => { const b = document.getElementById('search'); b.value = " + json.dumps(query) + ";"
                " b.dispatchEvent(new Event('input'));"
                " return [...document.querySelectorAll('#packages tbody tr')]"
                ".filter(r => getComputedStyle(r).display !== 'none').map(r => r.dataset.package); })()"
            )
            return shown

        assert visible("multi") == ["tfaot-model-test-multi"]
        description = manifests[("tfaot-model-test-simple", "1.0.0")]["model"]["description"]
        assert visible(description.split()[0]) and "tfaot-model-test-simple" in visible(
            description.split()[0]
        )
        assert visible("no-such-model") == []
        assert (
            browser.eval("document.getElementById('count').textContent")
            == f"0 of {len(listed)} packages shown"
        )
        assert sorted(visible("")) == sorted(listed)

        # Every link on the index and on each version page resolves over HTTP.
        pages = [
            server.url("index.html"),
            *browser.eval("[...document.querySelectorAll('#packages a')].map(a => a.href)"),
        ]
        assert len(pages) == 1 + len(rows)
        for url in pages:
            browser.open(url)
            hrefs = browser.eval("[...document.querySelectorAll('a[href], link[href]')].map(a => a.href)")
            assert all(h.startswith((server.url(""), "data:")) for h in hrefs), (
                hrefs
            )  # nothing from elsewhere
            for href in (h for h in hrefs if h.startswith("http")):
                with urllib.request.urlopen(href, timeout=30) as answer:
                    assert answer.status == 200, href
        browser.open(server.url(catalogue.page_path("tfaot-model-test-multi", "1.0.0")))
        cells = browser.eval(
            "[...document.querySelectorAll('#signature tbody tr')]"
            ".map(r => [...r.cells].map(c => c.textContent))"
        )
        assert cells == [
            ["0", "input", "input_0", "float32", "[batch, 4]", "tfaot::FloatArrays"],
            ["1", "input", "input_1", "float64", "[batch, 4]", "tfaot::DoubleArrays"],
            ["0", "output", "output_0", "float32", "[batch, 2]", "tfaot::FloatArrays"],
            ["1", "output", "output_1", "bool", "[batch, 2]", "tfaot::BoolArrays"],
        ]
        errors = browser.eval(
            "[...document.querySelectorAll('#verification tbody tr')].map(r => r.cells[0].textContent)"
        )
        assert errors == ["output_0", "output_1"]
        assert browser.eval("document.getElementById('setup').textContent") == (
            f'tfaot-dist setup "test-multi==1.0.0" --channel {server.url("")} --area $CMSSW_BASE'
        )
        browser.screenshot(screenshot.with_name("catalogue-page.png"))
        assert browser.errors == []


EXAMPLE_TF = """
import sys, numpy as np, tensorflow as tf
fn = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
x = np.arange(8).reshape(2, 4)
res = fn(input_0=tf.constant(x.astype(np.float32)), input_1=tf.constant(x.astype(np.float64)))
for y, b in zip(res["output_0"].numpy(), res["output_1"].numpy()):
    print(f"{y[0]:.9g} {y[1]:.9g} {int(b[0])} {int(b[1])}")
"""


def test_readme_cpp_example_builds_with_pkg_config_and_matches_tensorflow(
    built: Path, run: Cli, tmp_path: Path, example_models: Path, toolchain: Toolchain
) -> None:
    """The C++ snippet and pkg-config line of docs/how-to/cmake.md, as written, against an area set up
    from a channel."""
    import re
    import subprocess

    from conftest import REPO, tensorflow_answers

    page = (REPO / "docs" / "how-to" / "cmake.md").read_text().split("# Using a package from C++", 1)[1]
    cpp = re.search(r"```cpp\n(.*?)```", page, re.S)
    shell = re.search(r"pkg-config:\n\n```\n(.*?)```", page, re.S)
    assert cpp and shell, "docs/how-to/cmake.md: the C++ example and its pkg-config line"
    snippet = cpp.group(1)
    compile_line = next(line for line in shell.group(1).splitlines() if line.startswith("g++"))
    includes = [line for line in snippet.splitlines() if line.startswith("#include")]
    body = [line for line in snippet.splitlines() if line and not line.startswith("#include")]
    program = "\n".join(
        [
            "#include <cstdio>",
            *includes,
            "int main() {",
            *body,
            '  for (int r = 0; r < 2; r++) std::printf("%.9g %.9g %d %d\\n", output_0[r][0], '
            "output_0[r][1], int(output_1[r][0]), int(output_1[r][1]));",
            "}",
        ]
    )
    ch, area = tmp_path / "channel", tmp_path / "area"
    run("publish", "--channel", ch, "--dist", built / "dist")
    run("setup", "test-multi", "--channel", ch, "--area", area)
    work = tmp_path / "work"
    work.mkdir()
    (work / "my_program.cc").write_text(program)
    env = {"PATH": "/usr/bin:/bin", "PKG_CONFIG_PATH": str(area / "tfaot" / "lib" / "pkgconfig")}
    subprocess.run(["bash", "-c", compile_line], cwd=work, env=env, check=True, timeout=600)
    aot = subprocess.run(
        [str(work / "my_program")], capture_output=True, text=True, check=True
    ).stdout.split()
    answers = tensorflow_answers(
        toolchain, "readme-example", EXAMPLE_TF, example_models / "multi" / "saved_model", {}
    )
    tf = (answers / "stdout.txt").read_text().split()
    assert len(aot) == len(tf) == 8
    assert all(abs(float(a) - float(t)) <= 1e-5 for a, t in zip(aot, tf)), (aot, tf)
