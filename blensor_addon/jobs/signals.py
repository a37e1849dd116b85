"""SIGINT and SIGTERM in headless jobs: the one signal handler of the ``blensor`` command
and of :func:`~.range_scan.scan_range` run in a background (headless) Blender.

Blender calls Python back from C: the add-on's ``frame_change_post`` and
``depsgraph_update_post`` handler (``note_geometry_edits``) runs inside every
``scene.frame_set``, Python drivers inside every evaluation. A KeyboardInterrupt raised
there is printed and swallowed by Blender, and the job runs on (it did: a range
scan's transform pre-check and a motion export ran 13 minutes past SIGINT and SIGTERM),
and a signal arrives there most of the time, since most of a ``frame_set`` is spent in
them. So the handler of :class:`Signals` never raises inside such a callback: it notes
the signal and raises KeyboardInterrupt at the first call the interrupted code makes
once Blender has returned from the callback (a profile hook, :func:`sys.setprofile`,
installed only while a signal waits; the hook is what Python's profilers use, so the
exception comes out of the interrupted job's own frame). Outside callbacks it raises at
once, as Python's default handler does.

Modes (:attr:`Signals.mode`):

- ``"note"``: only note the signal (while Blender loads: a KeyboardInterrupt inside
  ``import bpy``, the add-on's registration or the reading of the .blend was swallowed
  or crashed bpy); :meth:`Signals.live` then raises a noted one.
- ``"raise"``: raise KeyboardInterrupt (outside callbacks, see above).
- ``"finish"`` (:meth:`Signals.finishing`, a range scan's frame loop): the first signal
  only asks the job to stop after the current frame (:attr:`Signals.stop_requested`);
  a second one raises.

Handlers are installed only in the main thread (Python's rule); a Blender with a UI keeps
its own (ESC cancels a job there).

A main thread stuck in a C call that does not return (Blender opening a FIFO or a hung
network file, and opening it again after the signal's EINTR: an Alembic cache does, inside
a frame change) never runs a Python handler, so no Python code of it can end the run.
The command line tool arms a watchdog of the native library for that
(:func:`arm_watchdog`, ``brt_watchdog_start``): when the interpreter has not
acknowledged a SIGINT or SIGTERM within :data:`WATCHDOG_GRACE` seconds (Python's handler
acknowledges whenever it runs, and a helper thread does while the main thread is in the
add-on's native ray caster, so a long cast is not taken for a stuck call), the library's
thread does the run's stop actions (:func:`stop_actions`: the manifest rewritten with
status ``cancelled``, the lock removed; before the first packet: nothing left), writes
the one line and ends the process with exit status 130, as a handled signal does. Without
the native library (the ``bvhtree`` backend only, Windows) there is no watchdog.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ctypes

#: a handler as :func:`signal.signal` takes and returns it
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
#: one stop action of :func:`stop_actions`: (mode, path, data)
StopAction = tuple[int, Path | None, bytes | None]

#: seconds the interpreter has to acknowledge a signal before the watchdog ends the run
WATCHDOG_GRACE = 5.0
#: the native library while the watchdog is armed (None: not armed)
_watchdog: ctypes.CDLL | None = None
#: the native library once the watchdog was armed: Python's handler acknowledges every signal
#: it runs for, also after :func:`disarm_watchdog` (until the handlers are restored, the
#: library's handler still counts them)
_acker: ctypes.CDLL | None = None
#: stop-action modes of ``brt_watchdog_action``
KEEP, WRITE, REMOVE, REMOVE_EMPTY_FOLDER = 0, 1, 2, 3


def arm_watchdog(grace: float = WATCHDOG_GRACE) -> bool:
    """Start the native watchdog (see the module docstring) in front of the handlers set
    now; returns False where it cannot run (no native library, Windows). The one line of
    a stuck end says "nothing written" until :func:`stop_actions` says otherwise."""
    global _watchdog, _acker
    import ctypes
    from ..core.errors import NativeLibraryError
    try:
        from ..raycast.native import load_library
        lib: ctypes.CDLL = load_library()
    except (ImportError, OSError, NativeLibraryError):
        return False
    if not hasattr(lib, "brt_watchdog_start"):  # a library built before the watchdog
        return False
    lib.brt_watchdog_start.argtypes = [ctypes.c_double, ctypes.c_int]
    lib.brt_watchdog_start.restype = ctypes.c_int
    lib.brt_watchdog_ack.argtypes = []
    lib.brt_watchdog_ack.restype = None
    lib.brt_watchdog_text.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.brt_watchdog_text.restype = ctypes.c_int
    lib.brt_watchdog_action.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                        ctypes.c_int64]
    lib.brt_watchdog_action.restype = ctypes.c_int
    if lib.brt_watchdog_start(float(grace), 130) != 0:
        return False
    _watchdog = _acker = lib
    stop_actions(f"; nothing written (Blender did not return within {grace:g} s)", [])
    if not any(t.name == "blensor-signal-ack" for t in threading.enumerate()):
        threading.Thread(target=_ack_while_free, name="blensor-signal-ack", daemon=True).start()
    return True


def watchdog_armed() -> bool:
    """True while the watchdog is armed (:func:`arm_watchdog`)."""
    return _watchdog is not None


def _ack_while_free() -> None:
    """Acknowledge signals while the main thread is in the add-on's own ray caster (a
    long native cast releases the interpreter's lock and returns; its signal is handled
    then). Blender's C calls release the lock too (a frame change, where an Alembic cache
    on a FIFO blocks): the interpreter's lock being free says nothing about a return."""
    import time
    main = threading.main_thread().ident
    assert main is not None  # (the main thread has started)
    while (lib := _watchdog) is not None:  # (read once: disarm_watchdog may clear it meanwhile)
        frame = sys._current_frames().get(main)
        if frame is not None and frame.f_code.co_filename.startswith(_RAYCAST_DIR):
            lib.brt_watchdog_ack()
        time.sleep(0.25)


def disarm_watchdog() -> None:
    """Stop acknowledging and doing stop actions (the command is over); the library's
    handlers go with the next ``signal.signal`` of SIGINT and SIGTERM."""
    global _watchdog
    if _watchdog is not None:
        stop_actions("; nothing written", [])
        _watchdog.brt_watchdog_ack()
        _watchdog = None


def stop_actions(after: str, actions: Sequence[StopAction]) -> None:
    """What the watchdog does if the run gets stuck from now on: ``actions`` (up to 8 of
    ``(mode, path, data)``: :data:`WRITE` ``data`` (bytes) to ``path`` (a temporary name,
    then renamed), :data:`REMOVE` the file, :data:`REMOVE_EMPTY_FOLDER`), then the line
    ``blensor: interrupted by <SIGNAL>`` + ``after``. Nothing without the watchdog."""
    lib = _watchdog
    if lib is None:
        return
    lib.brt_watchdog_text(b"blensor: interrupted by ", (after + "\n").encode())
    for slot in range(8):
        action: StopAction = actions[slot] if slot < len(actions) else (KEEP, None, None)
        mode, path, data = action
        raw = bytes(data or b"")
        lib.brt_watchdog_action(slot, mode, os.fsencode(path) if path is not None else None, raw or None,
                                len(raw))


#: Blender's file name of the code of a Python driver expression
_DRIVER_FILE = "<bpy driver>"
#: the add-on's ray casters (a native cast is a long C call that returns)
_RAYCAST_DIR = str(Path(__file__).resolve().parent.parent / "raycast") + os.sep
#: the add-on's UI layer: operators, panels and property-update callbacks, all called by Blender
_UI_DIR = str(Path(__file__).resolve().parent.parent / "ui") + os.sep


def _callback_codes() -> set[CodeType]:
    """Code objects of every function in Blender's handler lists (``bpy.app.handlers``)."""
    codes: set[CodeType] = set()
    try:
        import bpy
        handlers = bpy.app.handlers
    except Exception:  # no Blender (a job module imported without it): nothing calls back
        return codes
    for name in dir(handlers):
        items = getattr(handlers, name, None)
        if isinstance(items, list):
            for fn in items:
                code = getattr(getattr(fn, "__func__", fn), "__code__", None)
                if code is not None:
                    codes.add(code)
    return codes


def in_callback(frame: FrameType | None, codes: set[CodeType]) -> bool:
    """True if ``frame`` or one of its callers is Python code that Blender called from C:
    a handler of ``bpy.app.handlers`` (``codes``), a Python driver expression, or the
    add-on's UI layer. (Python frames chain across C calls, so the job's own frames are
    the callers of a callback's frame.)"""
    while frame is not None:
        code = frame.f_code
        if code in codes or code.co_filename == _DRIVER_FILE or code.co_filename.startswith(_UI_DIR):
            return True
        frame = frame.f_back
    return False


class Signals:
    """SIGINT and SIGTERM of a headless job (see the module docstring).

    Attributes:
        signum: the last signal received (``signal.SIGINT`` or ``SIGTERM``), or None.
        count: signals received since the handlers were installed.
        mode: ``"note"``, ``"raise"`` or ``"finish"``.
        writing: set by the caller once a frame was finished (kept whatever happens
            next), for the interrupt message.
    """

    #: the installed instance (one per process: the command line tool's, or a range scan's)
    active: Signals | None = None

    def __init__(self, mode: str = "raise") -> None:
        self.signum: int | None = None
        self.count = 0
        self.mode = mode
        self.writing = False
        self._base = 0  # count when the current "finish" scope began
        self._old: dict[signal.Signals, _Handler] = {}
        self._codes: set[CodeType] = set()
        self._waiting = False  # a signal waits for its callback to return (profile hook set)

    # -------------------------------------------------------------- installation
    def install(self) -> Signals:
        """Install the handlers (main thread only; elsewhere nothing changes) and make
        this the :attr:`active` instance."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        Signals.active = self
        return self

    def restore(self) -> None:
        """The handlers from before :meth:`install`; a signal still waiting is dropped
        (the job it was meant for is over)."""
        self._stop_waiting()
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
        if Signals.active is self:
            Signals.active = None

    @classmethod
    @contextmanager
    def scope(cls, mode: str = "raise") -> Iterator[Signals]:
        """The :attr:`active` instance, or (none active) a new one installed with ``mode``
        for the block, if this is a headless Blender (in one with a UI, an instance that
        installs nothing: signals stay Blender's)."""
        if cls.active is not None:
            yield cls.active
            return
        try:
            import bpy
            headless = bool(bpy.app.background)
        except Exception:
            headless = True
        sig = cls(mode)
        if headless:
            sig.install()
        try:
            yield sig
        finally:
            sig.restore()

    # ------------------------------------------------------------------- modes
    def live(self) -> None:
        """Blender is loaded: signals raise from now on; one noted meanwhile is raised now.

        Raises:
            KeyboardInterrupt: a signal was noted.
        """
        self.mode = "raise"
        if self.signum is not None:
            raise KeyboardInterrupt

    def quiet(self) -> None:
        """Only note signals from now on (the job is over; clean-up runs)."""
        self.mode = "note"
        self._stop_waiting()

    @contextmanager
    def finishing(self) -> Iterator[Signals]:
        """A block (a range scan's frame loop) in which the first signal only asks to
        stop after the current frame (:attr:`stop_requested`) and a second raises."""
        old, self.mode, self._base = self.mode, "finish", self.count
        try:
            yield self
        finally:
            self.mode = old

    @property
    def stop_requested(self) -> bool:
        """A signal came during the current :meth:`finishing` block."""
        return self.count > self._base

    # ---------------------------------------------------------------- handling
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if _acker is not None:  # the interpreter runs: the watchdog has nothing to do
            _acker.brt_watchdog_ack()
        self.signum = signum
        self.count += 1
        if self.mode == "note" or (self.mode == "finish" and self.count - self._base == 1):
            return
        if self._waiting:
            return  # raised once its callback returns
        codes = _callback_codes()
        if not in_callback(frame, codes):
            raise KeyboardInterrupt
        self._codes = codes
        self._waiting = True
        sys.setprofile(self._profile)

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        """Profile hook while a signal waits: raise it at the first event (a call or a
        return) outside every Blender callback."""
        if not self._waiting:
            sys.setprofile(None)
            return
        if in_callback(frame, self._codes):
            return
        self._stop_waiting()
        raise KeyboardInterrupt

    def _stop_waiting(self) -> None:
        if self._waiting:
            self._waiting = False
            if threading.current_thread() is threading.main_thread():
                sys.setprofile(None)
