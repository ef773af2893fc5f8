"""Typed errors, each class with its own exit code, carried to one exit path in the CLI."""

# Every exit code and its meaning: every --help lists them, and so does the documentation's exit-code
# page (generated from this table and the classes' docstrings by docs/hooks/reference.py).
EXIT_CODES = {
    0: "success",
    1: "specs --check: stale files",
    2: "usage error",
    3: "invalid input",
    4: "source unavailable (git repository, archive, channel)",
    5: "compilation failed",
    6: "verification against TensorFlow failed",
    7: "integrity failure (digest mismatch, unsafe archive)",
    8: "toolchain environment cannot be created",
    9: "scram refused a tool file (setup) or a removal (remove)",
    10: "unexpected error: the error line names the log file that holds the traceback",
    141: "standard output closed by its reader (e.g. | head -1): what was left to print is cut",
}
STDOUT_CLOSED = 141  # as a shell reports a program that SIGPIPE ended; no error class, no error line


class TfaotError(Exception):
    """Base class: the message is the single line printed to the user."""

    exit_code = 1


class UsageError(TfaotError):
    """Options that do not go together, or a missing argument."""

    exit_code = 2


class InvalidInput(TfaotError):
    """A registry entry, AOT config, SavedModel or an option's value is wrong, a name or --ref does not
    exist, or the registry directory is missing."""

    exit_code = 3


class SourceUnavailable(TfaotError):
    """A git repository, archive or channel cannot be reached or read."""

    exit_code = 4


class CompileFailed(TfaotError):
    """TensorFlow, XLA or the C++ compiler failed on valid-looking input."""

    exit_code = 5


class RuntimeBuildError(CompileFailed):
    """Building the XLA runtime or Abseil, or compiling a program against them, failed."""


class VerificationFailed(TfaotError):
    """Compiled code does not reproduce TensorFlow's numbers."""

    exit_code = 6


class IntegrityError(TfaotError):
    """Bytes do not match their recorded digest, or an archive is unsafe."""

    exit_code = 7


class ToolchainError(TfaotError):
    """An isolated build environment cannot be created."""

    exit_code = 8


class BuildFailed(TfaotError):
    """Some models of a build failed (scheduler.failure_message says which); exits with the code
    of the first failure, in registry order."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class ScramFailed(TfaotError):
    """`scram setup` refused a tool file of the area, or `scram tool remove` failed."""

    exit_code = 9


class BlobsNotReady(SourceUnavailable):
    """An OCI registry does not know a blob the manifest names (yet)."""


class UnexpectedError(TfaotError):
    """An exception no other class describes (a bug, or a failure of the machine nobody foresaw):
    the CLI writes its traceback to a log and names the log in the one error line."""

    exit_code = 10
