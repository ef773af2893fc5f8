"""The documentation site: `mkdocs build --strict` passes, the reference pages hold every command, exit
code and environment variable, and every internal link resolves in a real browser (headless Chromium,
the site served over HTTP on 127.0.0.1; those two tests in the toolchain tier)."""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from urllib.parse import unquote, urldefrag

import pytest
import yaml
from browser import Browser
from conftest import REPO
from httpserve import Server

from tfaot_dist import cli, environment, errors

VARIABLE = re.compile(r"TFAOT_DIST_[A-Z0-9_]+")


def build_site(out: Path, config: Path = REPO / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    proc = build_site(out)
    assert proc.returncode == 0 and "WARNING" not in proc.stderr, proc.stderr
    return out


def page_text(site: Path, page: str) -> str:
    return html.unescape((site / page / "index.html").read_text())


def test_reference_holds_every_command_exit_code_and_variable(site: Path) -> None:
    top = cli.parser()
    action = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    commands = page_text(site, "reference/commands")
    for name in action.choices:
        assert f'id="{name}"' in commands and f"usage: tfaot-dist {name} " in commands, name
    codes = page_text(site, "reference/exit-codes")
    rows = re.findall(r"<tr>\s*<td>(\d+)</td>\s*<td>(.*?)</td>", codes, re.S)
    assert [(int(code), meaning) for code, meaning in rows] == list(errors.EXIT_CODES.items())
    variables = page_text(site, "reference/environment")
    for name in {**environment.VARIABLES, **environment.DEVELOPER_VARIABLES}:
        assert f"<code>{name}</code>" in variables, name
    aot_config = page_text(site, "reference/aot-config")
    assert all(
        f"<code>{key}</code>" in aot_config for key in ("name", "saved_model", "batch_sizes", "tolerance")
    )


def test_every_variable_in_the_code_is_listed() -> None:
    """environment.py is the one list: every TFAOT_DIST_* name the package, the scripts and the tests'
    conftest use is in it, and every name in it is used somewhere."""
    places = [REPO / "tfaot_dist", REPO / "scripts", REPO / "tests" / "conftest.py"]
    used = {
        name
        for place in places
        for path in ([place] if place.is_file() else sorted(place.rglob("*")))
        if path.is_file() and "node_modules" not in path.parts and "__pycache__" not in path.parts
        for name in VARIABLE.findall(path.read_text(errors="replace"))
    }
    listed = {**environment.VARIABLES, **environment.DEVELOPER_VARIABLES}
    assert used - set(listed) == set(), "add them to tfaot_dist/environment.py"
    everywhere = [REPO / d for d in ("tfaot_dist", "scripts", "tests", ".github", "examples", "benchmarks")]
    mentioned = " ".join(
        p.read_text(errors="replace")
        for d in everywhere
        for p in sorted(d.rglob("*"))
        if p.is_file()
        and p.suffix in (".py", ".h", ".cc", ".j2", ".yml", ".sh", ".mjs", "")
        and p.name != "environment.py"
    )
    assert [name for name in listed if name not in mentioned] == [], "listed but used nowhere"


def broken_links(browser: Browser, start: str) -> list[str]:
    """Open every page and file of the site reachable from start, in Chromium; what does not resolve:
    a page or file that does not answer 200, an anchor that is no id on its page."""
    origin = start.split("/", 3)[:3]
    pending, linked_from = [start], {start: "(start)"}
    ids: dict[str, set[str]] = {}
    anchors: list[tuple[str, str, str]] = []  # (page, fragment, the page linking to it)
    broken = []
    while pending:
        url = pending.pop(0)
        browser.open(url)
        status = browser.eval("performance.getEntriesByType('navigation')[0].responseStatus")
        if status != 200:
            broken.append(f"{url}: HTTP {status} (linked from {linked_from[url]})")
            continue
        if browser.eval("document.contentType") != "text/html":
            continue
        ids[url] = set(
            browser.eval("[...document.querySelectorAll('[id], a[name]')].map(e => e.id || e.name)")
        )
        hrefs = browser.eval(
            "[...document.querySelectorAll('a[href], link[href], script[src], img[src]')]"
            ".map(e => e.href || e.src)"
        )
        for href in hrefs:
            target, fragment = urldefrag(href)
            if target.split("/", 3)[:3] != origin:
                continue  # outside the site
            if fragment:
                anchors.append((target, unquote(fragment), url))
            if target not in linked_from:
                linked_from[target] = url
                pending.append(target)
    for target, fragment, source in anchors:
        if target in ids and fragment not in ids[target]:
            broken.append(f"{target}#{fragment}: no such anchor (linked from {source})")
    return broken


# The crawls run in the toolchain tier (marked slow): a real browser's page loads are 15-20 CPU-s, a
# fifth of the fast tier's, which is for what fails in a minute (lint, the build of the site, units).
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium for the crawls of this module (a start costs over a second); each site is served
    on a port of its own, so no page of one crawl is another's."""
    with Browser() as shared:
        yield shared


@pytest.mark.tooling
@pytest.mark.slow
def test_every_internal_link_resolves_in_chromium(site: Path, browser: Browser) -> None:
    seen = len(browser.errors)  # what an earlier crawl saw is not this one's
    with closing(Server(site)) as server:
        assert broken_links(browser, server.url("index.html")) == []
        # Chromium asks for /favicon.ico by itself when it shows a file that is no page (a .css, a .js):
        # no link of the site names it.
        assert [e for e in browser.errors[seen:] if not e.endswith(server.url("favicon.ico"))] == []
        assert server.count("reference/commands/") == 1 and server.count("explanation/code-map/") == 1


@pytest.mark.tooling
@pytest.mark.slow
def test_the_link_check_finds_a_missing_page_and_a_missing_anchor(browser: Browser, tmp_path: Path) -> None:
    """The crawl is really looking: a missing page and an anchor nobody defines, both linked from a page
    the crawl reaches only through another, are named, and a defined anchor is not. A site of two pages
    (a copy of the whole site costs a second crawl of it)."""
    broken_site = tmp_path / "site"
    commands = broken_site / "reference" / "commands" / "index.html"
    commands.parent.mkdir(parents=True)
    (broken_site / "index.html").write_text(
        '<html><body><a href="reference/commands/">commands</a></body></html>'
    )
    commands.write_text(
        '<html><body><h2 id="init">init</h2><a href="#init">init</a> <a href="#no-such-command">gone</a>'
        ' <a href="../../explanation/code-map/">code map</a></body></html>'
    )
    with closing(Server(broken_site)) as server:
        broken = broken_links(browser, server.url("index.html"))
    assert any(b.startswith(server.url("explanation/code-map/") + ": HTTP 404") for b in broken), broken
    assert any(
        b.startswith(server.url("reference/commands/") + "#no-such-command: no such anchor") for b in broken
    )
    assert len(broken) == 2, broken


@pytest.mark.tooling
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """With the site's settings (mkdocs.yml: theme, extensions, validation; not its page list, nor the
    hook that writes the reference pages) and --strict, a link to a page that does not exist fails the
    build, naming the link. A site of two pages, built with and without the link (the whole site is
    built once, by the module's fixture)."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    for key in ("nav", "hooks", "exclude_docs"):
        del config[key]
    docs = tmp_path / "docs"
    first = docs / "tutorial" / "first-session.md"
    first.parent.mkdir(parents=True)
    (docs / "index.md").write_text("# Home\n\n[A first session](tutorial/first-session.md)\n")
    first.write_text("# A first session\n")
    mkdocs_yml = tmp_path / "mkdocs.yml"
    mkdocs_yml.write_text(yaml.safe_dump({**config, "docs_dir": str(docs)}))
    proc = build_site(tmp_path / "site", mkdocs_yml)
    assert proc.returncode == 0 and "WARNING" not in proc.stderr, proc.stderr
    first.write_text(first.read_text() + "\n[gone](../how-to/no-such-page.md)\n")
    proc = build_site(tmp_path / "site", mkdocs_yml)
    assert proc.returncode != 0 and "no-such-page.md" in proc.stderr, proc.stderr
