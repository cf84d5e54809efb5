"""The one exception family the rollup raises, each with a message a user can act on.

The CLI catches `GoodputError` once and prints `Error: <message>`, exit 2. Messages name the file and, for a bad
record, the byte offset or line where it was met. Only what the input or the user's options cause is raised as one:
any other exception leaving the library is a bug in goodput, and the CLI says so (exit 3) instead of blaming a file.
"""

from __future__ import annotations


class GoodputError(Exception):
    """Base of every error the library raises on purpose."""


class InputError(GoodputError):
    """A path that names nothing readable: missing, unreadable, an empty directory, a glob that matches nothing."""


class TraceFormatError(GoodputError):
    """A file that is not a trace, or a corrupt record inside one (not a truncated final record: that is a notice)."""

    def __init__(self, path: str, where: str, problem: str) -> None:
        super().__init__(f"{path}: {where}: {problem}" if where else f"{path}: {problem}")
        self.path = path
        self.where = where
        self.problem = problem

    def __reduce__(self):  # raised in worker processes and Ray tasks: must survive pickling with its fields
        return (type(self), (self.path, self.where, self.problem))


class OptionError(GoodputError):
    """An option value the library cannot use (`--by phase`, a precedence naming a bucket twice): `option` names the
    command-line option it comes from, `message` says what was expected, so the CLI reports it as a bad option."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message

    def __reduce__(self):
        return (type(self), (self.option, self.message))
