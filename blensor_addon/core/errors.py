"""Errors raised by BlenSor for bad input.

Every check that rejects a user setting raises :class:`SettingsError`, whose message
names the setting and the values it allows, so the UI (``self.report``) and the
``blensor`` command (exit code 2) can show it as one line.
"""
from __future__ import annotations


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

    def __init__(self, setting: str, allowed: str, value: object) -> None:
        self.setting = setting
        self.allowed = allowed
        self.value = value
        shown = repr(value)
        if len(shown) > self.MAX_VALUE_CHARS:
            shown = f"{shown[:self.MAX_VALUE_CHARS - 40]}... ({len(shown):,} characters)"
        super().__init__(f"{setting} must be {allowed}, got {shown}")


class OutputError(BlensorError, OSError):
    """The output folder could not be set up (lock file, disk full, permissions) before
    anything was written. ``OutputError(errno, what, path)``; the message names the file,
    the cause and that nothing was written."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}; nothing written"


class NativeLibraryError(BlensorError, RuntimeError):
    """The native ray-cast library is missing, of another ABI version, or failed."""
