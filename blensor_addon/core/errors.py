"""Errors raised by BlenSor for bad input.

Every check that rejects a user setting raises :class:`SettingsError`, whose message
names the setting and the values it allows, so the UI (``self.report``) and the
``blensor`` command (exit code 2) can show it as one line.
"""
from __future__ import annotations

from collections.abc import Iterable


class BlensorError(Exception):
    """Base class of the errors BlenSor raises on purpose."""


class SettingsError(BlensorError, ValueError):
    """A setting (sensor property, command-line option, API argument) is out of range.

    Attributes:
        setting: name of the setting, as the user sees it (e.g. ``"angle_resolution"``).
        allowed: human-readable description of the allowed values.
        value: the rejected value.
    """

    #: longest rendering of the rejected value in the message (an elevation list of 10^5
    #: numbers stays one readable line)
    MAX_VALUE_CHARS = 200

    def __init__(self, setting: str, allowed: str, value: object, hint: str = "") -> None:
        """``hint``: appended after the value (e.g. :func:`did_you_mean`'s ``"; did you
        mean 'x'?"``), kept as :attr:`hint` so a caller that renames the setting keeps it."""
        self.setting = setting
        self.allowed = allowed
        self.value = value
        self.hint = hint
        shown = repr(value)
        if len(shown) > self.MAX_VALUE_CHARS:
            shown = f"{shown[:self.MAX_VALUE_CHARS - 40]}... ({len(shown):,} characters)"
        super().__init__(f"{setting} must be {allowed}, got {shown}{hint}")


def did_you_mean(word: object, choices: Iterable[object], typed: object = None) -> str:
    """``"; did you mean 'x'?"`` with ``x`` the choice closest to ``word``
    (:func:`difflib.get_close_matches`, ratio >= 0.6, case-insensitive), or ``""`` when
    none is close; the hint of a :class:`SettingsError` for a name not among ``choices``.
    ``typed``: the value the message shows, when it is more than ``word`` (a list of
    formats): the hint then names ``word`` too (``"; did you mean 'pcd' for 'pcdd'?"``)."""
    import difflib
    names = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(word).lower(), list(names), n=1)
    if not close:
        return ""
    part = "" if typed is None or str(typed) == str(word) else f" for {str(word)!r}"
    return f"; did you mean {names[close[0]]!r}{part}?"


class OutputError(BlensorError, OSError):
    """The output folder could not be set up (lock file, disk full, permissions) before
    anything was written. ``OutputError(errno, what, path)``; the message names the file,
    the cause and that nothing was written."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}; nothing written"


class NativeLibraryError(BlensorError, RuntimeError):
    """The native ray-cast library is missing, of another ABI version, or failed."""
