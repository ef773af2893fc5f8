"""Fetching model sources, pinned and cached by content: git commits and http(s) archives.

Layout under the cache:
    git/<url digest>.git     bare repository holding the fetched commits
    sources/<commit>/        the tree of one commit (git archive), read-only use
    archives/<sha256>        a downloaded archive (download.py)
    sources/sha256-<hex>/    the tree of that archive, safely extracted

With offline=True nothing is fetched: a source missing from the cache is a
SourceUnavailable error that names it.

A source tree is extracted into a temporary sibling and renamed into place,
so a tree that exists is complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import git

from tfaot_dist import names
from tfaot_dist.cache import Cache, check_entry, ensure_entry, seal
from tfaot_dist.errors import InvalidInput, SourceUnavailable
from tfaot_dist.pins import ArchiveSource, GitSource, check_git_url
from tfaot_dist.util.archives import TAR, extract, kind_of_content, kind_of_url
from tfaot_dist.util.cached_archives import cached_archive, cached_verified, discard, keep
from tfaot_dist.util.download import download
from tfaot_dist.util.fs import file_lock, owned_temp_dir

# The marker of a complete source tree (its content: the commit, or sha256:HEX).
SOURCE_COMPLETE = ".complete"
# Transports that cannot run commands: ext:: and fd:: are never allowed.
ALLOWED_PROTOCOLS = "file:git:http:https:ssh"


def source_url(text: str) -> str:
    """--source: a relative path to a local repository becomes a file:// URL of its absolute path."""
    # A colon before the first slash: a URL, user@host:path or a transport (ext::): git's rules apply.
    if ":" in text.split("/", 1)[0] or text.startswith(("/", "-")):
        return text
    path = Path(text)
    if not path.is_dir():
        raise SourceUnavailable(
            f"--source: {text}: no such directory (a relative --source is a path to a local "
            "git repository; remote ones need https://, ssh://, git:// or user@host:path)"
        )
    return path.resolve().as_uri()


def git_env() -> dict[str, str]:
    """Environment for every git call: no prompts, only safe transports, no user config surprises."""
    return {
        "GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
        # No gc or maintenance left running in the background of a fetch: when our call returns,
        # no git of ours works in the mirror any more (see GitSources._mirror).
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "gc.auto",
        "GIT_CONFIG_VALUE_0": "0",
        "GIT_CONFIG_KEY_1": "maintenance.auto",
        "GIT_CONFIG_VALUE_1": "false",
    }


@dataclass(frozen=True)
class ResolvedSource:
    url: str
    ref: str
    commit: str
    root: Path  # the extracted tree


def fetch_source(source: GitSource | ArchiveSource, cache: Path, offline: bool = False) -> ResolvedSource:
    """The tree of a registry entry's source (pins.GitSource or pins.ArchiveSource)."""
    if isinstance(source, ArchiveSource):
        return ArchiveSources(cache, offline).fetch(source.url, source.sha256)
    return GitSources(cache, offline).fetch(source.url, source.commit)


class GitSources:
    def __init__(self, cache: Path, offline: bool = False):
        self.cache = cache
        self.layout = Cache(cache)
        self.offline = offline

    def _mirror_path(self, url: str) -> Path:
        return self.layout.git_mirror(url)

    def _mirror(self, url: str) -> git.Repo:
        """The bare mirror of url; called under its lock, so no git process of ours is using it."""
        path = self._mirror_path(url)
        repo = None
        if (path / "HEAD").exists() and (path / "config").exists():
            try:
                repo = git.Repo(path)
            except git.GitError:  # left half-made by a process that was killed
                repo = None
        if repo is None:
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            repo = git.Repo.init(path, bare=True)
        # A git killed mid-fetch leaves its lock files (shallow.lock, refs/...lock), which would
        # make every later fetch fail. A git whose parent alone was killed may still be running.
        _wait_for_other_processes_in(path)
        for stale in [*path.glob("*.lock"), *path.glob("refs/**/*.lock")]:
            stale.unlink(missing_ok=True)
        repo.git.update_environment(**git_env())
        return repo

    def head_branch(self, url: str) -> str | None:
        """The branch the server's HEAD points at (what `--ref HEAD` follows), None if it names none."""
        cmd = git.cmd.Git()
        cmd.update_environment(**git_env())
        try:
            out = str(cmd.ls_remote("--symref", "--", url, "HEAD"))
        except git.GitCommandError as exc:
            raise SourceUnavailable(f"{url}: cannot read git repository: {_last_line(exc.stderr)}") from None
        for line in out.splitlines():
            target, _, name = line.partition("\t")
            if name == "HEAD" and target.startswith("ref: refs/heads/"):
                return target.removeprefix("ref: refs/heads/")
        return None

    def resolve_ref(self, url: str, ref: str) -> str:
        """The full commit SHA that ref names on the server."""
        check_git_url(url, "source")
        names.git_ref(ref, "--ref")
        cmd = git.cmd.Git()
        cmd.update_environment(**git_env())
        try:
            out = str(cmd.ls_remote("--", url, ref, f"{ref}^{{}}"))
        except git.GitCommandError as exc:
            raise SourceUnavailable(f"{url}: cannot read git repository: {_last_line(exc.stderr)}") from None
        refs = {}
        for line in out.splitlines():
            sha, name = line.split("\t", 1)
            refs[name] = sha
        for candidate in (
            f"{ref}^{{}}",
            f"refs/tags/{ref}^{{}}",
            f"refs/heads/{ref}",
            f"refs/tags/{ref}",
            ref,
        ):
            if candidate in refs:
                return refs[candidate]
        if names.COMMIT_SHA.fullmatch(ref):
            self.fetch(url, ref)  # a commit SHA is its own resolution once it can be fetched
            return ref
        raise InvalidInput(f"--ref: {ref!r} not found in {url}")

    def fetch(self, url: str, commit: str) -> ResolvedSource:
        """The source tree of commit, from the cache or fetched from url."""
        tree = self.layout.sources / commit
        if check_entry(tree) and (tree / SOURCE_COMPLETE).is_file():
            return ResolvedSource(url, "", commit, tree / "tree")
        if self.offline and not (self._mirror_path(url) / "HEAD").exists():
            raise SourceUnavailable(f"offline: commit {commit} of {url} is not in the cache {self.cache}")

        def build(staged: Path) -> None:
            with file_lock(self.layout.git_mirror_lock(url)):
                self._fetch_into_mirror(url, commit, staged / "tree")

        ensure_entry(tree, build, marker=SOURCE_COMPLETE)
        return ResolvedSource(url, "", commit, tree / "tree")

    def _fetch_into_mirror(self, url: str, commit: str, dest: Path) -> None:
        """Fetch commit into the mirror of url and extract its tree into dest."""
        # Under the mirror's lock: parallel builds of other commits share the bare repository.
        repo = self._mirror(url)
        if not _has_commit(repo, commit):
            if self.offline:
                raise SourceUnavailable(f"offline: commit {commit} of {url} is not in the cache {self.cache}")
            try:
                repo.git.fetch("--depth=1", "--no-tags", "--", url, commit)
            except git.GitCommandError:
                # Servers that refuse fetching by SHA: take everything, then look.
                try:
                    repo.git.fetch(
                        "--no-tags", "--", url, "+refs/heads/*:refs/remotes/src/*", "+refs/tags/*:refs/tags/*"
                    )
                except git.GitCommandError as exc:
                    raise SourceUnavailable(f"{url}: cannot fetch: {_last_line(exc.stderr)}") from None
            if not _has_commit(repo, commit):
                raise SourceUnavailable(f"{url}: commit {commit} is not available")
        data = repo.git.archive("--format=tar", commit, stdout_as_string=False)
        _extract_git_archive(data, dest, f"{url} at {commit[:12]}")


class ArchiveSources:
    """tar.gz / zip archives over http(s), verified against the sha256 of the registry entry."""

    def __init__(self, cache: Path, offline: bool = False):
        self.cache = cache
        self.offline = offline

    def fetch(self, url: str, sha256: str) -> ResolvedSource:
        """Download (verified) and extract in temporary places in the cache, then rename both into
        place: an archive that cannot be had, or is unsafe, leaves the cache as it was."""
        tree = Cache(self.cache).sources / f"sha256-{sha256}"
        pin = f"sha256:{sha256}"
        if check_entry(tree) and (tree / SOURCE_COMPLETE).exists():
            return ResolvedSource(url, "", pin, tree / "tree")
        if tree.exists():  # changed since it was made: made again (moved aside first, then removed)
            with owned_temp_dir(self.cache, ".source-") as aside, contextlib.suppress(FileNotFoundError):
                os.rename(tree, aside / "old")
        cached = cached_verified(self.cache, sha256)  # hashed again: replaced bytes are a miss
        downloaded = None
        if cached is None:
            if self.offline:
                raise SourceUnavailable(
                    f"offline: source archive {url} (sha256 {sha256}) is not in the cache "
                    f"{cached_archive(self.cache, sha256).parent}"
                )
            downloaded = download(url, self.cache, sha256).path
        try:
            with owned_temp_dir(self.cache, ".source-") as staged:
                result = staged / "result"
                archive = downloaded or cached
                assert archive is not None  # downloaded when it was not cached
                # The URL declares tar or zip (.zip, .tar.gz, ...); one that does not is read by its magic
                # number, and bytes that are both are refused either way.
                kind = kind_of_url(url) or kind_of_content(archive)
                extract(archive, staged / "unpacked", f"{url} (sha256 {sha256[:12]})", kind=kind)
                result.mkdir()
                os.rename(_source_root(staged / "unpacked"), result / "tree")
                (result / SOURCE_COMPLETE).write_text(pin + "\n")
                seal(result)
                if downloaded:
                    keep(downloaded, self.cache, sha256)
                tree.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.rename(result, tree)
                except OSError:
                    if not (tree / SOURCE_COMPLETE).exists():  # not another process that was faster
                        raise
        finally:
            if downloaded:
                discard(downloaded)
        return ResolvedSource(url, "", pin, tree / "tree")


def _source_root(unpacked: Path) -> Path:
    """The archive's single top-level directory (as in sdists and forge tarballs), else the whole tree."""
    entries = list(unpacked.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return unpacked


def _wait_for_other_processes_in(path: Path, timeout: float = 300) -> None:
    """Wait (at most timeout) while a process that is not our child works in path: a git whose
    parent was killed (git runs with the repository as its directory)."""
    deadline = time.monotonic() + timeout
    here = str(path.resolve())
    while time.monotonic() < deadline:
        busy = False
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                target = os.readlink(proc / "cwd")
                parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):  # gone, or another user's
                continue
            if (target == here or target.startswith(here + "/")) and parent != os.getpid():
                busy = True
                break
        if not busy:
            return
        time.sleep(0.5)


def _has_commit(repo: git.Repo, commit: str) -> bool:
    try:
        return bool(repo.git.cat_file("-t", commit) == "commit")
    except git.GitCommandError:
        return False


def _extract_git_archive(data: bytes, dest: Path, label: str) -> None:
    """Extract the tar that git archive wrote through the one archive reader: plain files, dirs and
    links whose real path stays inside the tree (others: IntegrityError naming the link)."""
    with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=".git-archive-", suffix=".tar") as f:
        f.write(data)
        f.flush()
        extract(Path(f.name), dest, label, kind=TAR)
    os.utime(dest)


def _last_line(stderr: object) -> str:
    lines = [ln.strip() for ln in str(stderr or "").strip().splitlines() if ln.strip()]
    text = lines[-1] if lines else "git failed"
    return text.removeprefix("stderr: ").strip("'").strip()
