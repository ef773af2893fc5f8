"""Fetching model sources from git at pinned commits, cached by commit.

Layout under the cache:
    git/<url digest>.git     bare repository holding the fetched commits
    sources/<commit>/        the tree of one commit (git archive), read-only use

A source tree is extracted into a temporary sibling and renamed into place,
so a tree that exists is complete.
"""

import io
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import git

from tfaot_dist import names
from tfaot_dist.errors import InvalidInput, SourceUnavailable
from tfaot_dist.fsutil import file_lock, replace_dir, sha256_bytes, temp_sibling

# Transports that cannot run commands: ext:: and fd:: are never allowed.
ALLOWED_PROTOCOLS = "file:git:http:https:ssh"
_URL = re.compile(
    r"(?:(?:https?|ssh|git|file)://[^\s\\]+"  # scheme://...
    r"|/[^\s\\:]*"  # an absolute local path
    r"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s\\:]+)"  # scp-like user@host:path
)


def check_git_url(url, where: str) -> str:
    if not isinstance(url, str) or "::" in url or url.startswith("-") or not _URL.fullmatch(url):
        raise InvalidInput(f"{where}: unsupported git URL {url!r} (use https://, ssh://, git://, file:// or a path)")
    return url


def git_env() -> dict:
    """Environment for every git call: no prompts, only safe transports, no user config surprises."""
    return {
        "GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
    }


@dataclass(frozen=True)
class ResolvedSource:
    url: str
    ref: str
    commit: str
    root: Path  # the extracted tree


class GitSources:
    def __init__(self, cache: Path):
        self.cache = cache

    def _mirror(self, url: str) -> git.Repo:
        path = self.cache / "git" / f"{sha256_bytes(url.encode())[:24]}.git"
        if not (path / "HEAD").exists():
            path.mkdir(parents=True, exist_ok=True)
            repo = git.Repo.init(path, bare=True)
        else:
            repo = git.Repo(path)
        repo.git.update_environment(**git_env())
        return repo

    def resolve_ref(self, url: str, ref: str) -> str:
        """The full commit SHA that ref names on the server."""
        check_git_url(url, "source")
        names.git_ref(ref, "--ref")
        cmd = git.cmd.Git()
        cmd.update_environment(**git_env())
        try:
            out = cmd.ls_remote("--", url, ref, f"{ref}^{{}}")
        except git.GitCommandError as exc:
            raise SourceUnavailable(f"{url}: cannot read git repository: {_last_line(exc.stderr)}") from None
        refs = {}
        for line in out.splitlines():
            sha, name = line.split("\t", 1)
            refs[name] = sha
        for candidate in (f"{ref}^{{}}", f"refs/tags/{ref}^{{}}", f"refs/heads/{ref}", f"refs/tags/{ref}", ref):
            if candidate in refs:
                return refs[candidate]
        if names.COMMIT_SHA.fullmatch(ref):
            self.fetch(url, ref)  # a commit SHA is its own resolution once it can be fetched
            return ref
        raise InvalidInput(f"--ref: {ref!r} not found in {url}")

    def fetch(self, url: str, commit: str) -> ResolvedSource:
        """The source tree of commit, from the cache or fetched from url."""
        tree = self.cache / "sources" / commit
        if (tree / ".complete").exists():
            return ResolvedSource(url, "", commit, tree / "tree")
        with file_lock(self.cache / "sources" / f"{commit}.lock"):
            if (tree / ".complete").exists():
                return ResolvedSource(url, "", commit, tree / "tree")
            repo = self._mirror(url)
            if not _has_commit(repo, commit):
                try:
                    repo.git.fetch("--depth=1", "--no-tags", "--", url, commit)
                except git.GitCommandError:
                    # Servers that refuse fetching by SHA: take everything, then look.
                    try:
                        repo.git.fetch("--no-tags", "--", url, "+refs/heads/*:refs/remotes/src/*",
                                       "+refs/tags/*:refs/tags/*")
                    except git.GitCommandError as exc:
                        raise SourceUnavailable(f"{url}: cannot fetch: {_last_line(exc.stderr)}") from None
                if not _has_commit(repo, commit):
                    raise SourceUnavailable(f"{url}: commit {commit} is not available")
            staged = temp_sibling(tree)
            data = repo.git.archive("--format=tar", commit, stdout_as_string=False)
            _extract_git_archive(data, staged / "tree")
            (staged / ".complete").write_text(commit + "\n")
            replace_dir(staged, tree)
        return ResolvedSource(url, "", commit, tree / "tree")


def _has_commit(repo: git.Repo, commit: str) -> bool:
    try:
        return repo.git.cat_file("-t", commit) == "commit"
    except git.GitCommandError:
        return False


def _extract_git_archive(data: bytes, dest: Path) -> None:
    """Extract the tar that git archive wrote, refusing anything but plain files and dirs."""
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.name == "pax_global_header":
                continue
            if not (member.isfile() or member.isdir() or member.issym()):
                raise InvalidInput(f"source archive: unsupported entry {member.name!r}")
        tar.extractall(dest, filter="data")
    os.utime(dest)


def _last_line(stderr) -> str:
    lines = [ln.strip() for ln in str(stderr or "").strip().splitlines() if ln.strip()]
    text = lines[-1] if lines else "git failed"
    return text.removeprefix("stderr: ").strip("'").strip()
