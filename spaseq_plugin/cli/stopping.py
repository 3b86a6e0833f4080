"""How a command stops on a signal: Ctrl-C (SIGINT), SIGTERM, SIGHUP.

Each raises an exception in the main thread (:class:`KeyboardInterrupt`, or
:class:`Terminated` for the two a service manager or a closed terminal
sends), which the command turns into its summary and exit status; the
default action of SIGTERM and SIGHUP would end the process at once, mid-line.

A run reading live input stops in two steps instead (:class:`GracefulStop`).
An exception raised wherever the main thread is would drop what the sources
had received and the engine not yet taken (up to a queue of events a TCP
sender was told had arrived), and the event a sender had half sent, without
a word.  So the first signal only asks the input to stop reading: each live
source passes on what it holds, an event left half sent becomes a
``truncated`` rejection, the engine evaluates them, and the run stops there
as on an interrupt (pending matches are not emitted: it is no end of input;
a checkpoint is kept).  A second signal, or ``--stop-timeout`` seconds
(``STOP_TIMEOUT``: under the 10 s that ``docker stop`` waits before SIGKILL),
stops it at once.

Then the outputs are closed: each gets what is left of the timeout, and at
least ``OUTPUT_TIMEOUT``, to take what the run holds for it.  One that takes
nothing for that long (a pipe whose reader stopped reading) is let go, what it
had not taken dropped, so that the run still ends, with its summary.

All of that happens in the main thread, where Python runs signal handlers, and
only when it runs Python.  A call into native code that does not return (an
Oxigraph evaluation of a GPM trying billions of combinations on one event) would
hold every signal off until it did: a run deaf to Ctrl-C and SIGTERM for
hours.  So a watchdog thread hears each signal too (``signal.set_wakeup_fd``)
and, if the main thread has not taken it within ``--stop-timeout``, stops the
process at once, saying where the main thread was held and that what it had
not written is lost (:class:`_Watchdog`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
import _thread
from collections.abc import Iterable, Iterator

EXIT_INTERRUPTED = 130
STOP_TIMEOUT = 5.0      # seconds a graceful stop may take before it stops at once
OUTPUT_TIMEOUT = 1.0    # seconds each output has at least, after a stop, to take what it is given

log = logging.getLogger(__name__)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: what a service manager (systemd, ``docker stop``) or a closed
    terminal sends.  The run stops as Ctrl-C stops it (outputs closed whole, the
    summary printed, a checkpoint kept for resuming), with exit status 128 + the
    signal's number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interrupted_status(stop: KeyboardInterrupt) -> int:
    return 128 + stop.signum if isinstance(stop, Terminated) else EXIT_INTERRUPTED


def stopped(stop: KeyboardInterrupt) -> int:
    """Say that the command was stopped, outside a run (which says it in its summary): its exit status."""
    print(f"spaseq: terminated ({stop})" if isinstance(stop, Terminated) else "spaseq: interrupted",
          file=sys.stderr)
    return interrupted_status(stop)


def _stop_exception(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _raise_stop(signum, frame):
    raise _stop_exception(signum)


# each signal that stops a command, with the handler that leaves it to us
_STOP_SIGNALS = (("SIGTERM", signal.SIG_DFL), ("SIGHUP", signal.SIG_DFL), ("SIGINT", signal.default_int_handler))


def _take_signals(handler, also=()) -> dict:
    """Set ``handler`` for each stop signal whose handler is its default or one of
    ``also`` (a signal the process inherited as ignored, as under nohup, stays so;
    so does a Ctrl-C handler set by whoever called the command): {number: the
    handler it had}."""
    before = {}
    for name, default in _STOP_SIGNALS:
        number = getattr(signal, name, None)
        previous = None if number is None else signal.getsignal(number)
        if number is not None and (previous is default or previous in also):
            with contextlib.suppress(ValueError):       # (not the main thread: left as it is)
                signal.signal(number, handler)
                before[number] = previous
    return before


def _give_back(before: dict) -> None:
    for number, handler in before.items():
        signal.signal(number, handler)


@contextlib.contextmanager
def stopping_from_the_start():
    """SIGTERM and SIGHUP raise :class:`Terminated` from the command's first line on:
    its imports take a third of a second, and their default action ended the
    process there (status -15 to its parent, without a word).  (Before Python
    runs the command's first line, the interpreter starting, 20 to 70 ms, the
    default action remains.)  :func:`stopping_on_signals` takes over once the
    command runs."""
    before = _take_signals(_raise_stop)
    try:
        yield
    finally:
        _give_back(before)


class GracefulStop:
    """The two-step stop of a run whose input can stop reading without losing
    what it read (``input.stop_reading(reason)``, e.g. ``merge_arrival``'s).

    Armed with :meth:`armed` around the run, and :meth:`items` wraps the
    input the engine reads: after the first signal it passes on what the
    input still gives, then raises the signal's exception (never letting the
    engine take the input's end for the end of the stream).  Past the
    timeout, a watcher thread sends the signal again."""

    _current: GracefulStop | None = None

    def __init__(self, input_, timeout: float = STOP_TIMEOUT):
        self.input = input_
        self.timeout = timeout
        self.stop: KeyboardInterrupt | None = None
        self.drained = False    # stopped where the engine had taken the whole input
        self.since: float | None = None     # when the first signal came
        self._signum = 0
        # (a thread started when armed: the signal handler only sets an Event, as
        # starting a thread there could wait for a lock the interrupted code holds)
        self._requested = threading.Event()
        self._done = threading.Event()

    @contextlib.contextmanager
    def armed(self):
        GracefulStop._current = self
        threading.Thread(target=self._watch, daemon=True, name="spaseq stop-timeout").start()
        try:
            yield self
        finally:
            self._disarm()

    def _disarm(self) -> None:
        GracefulStop._current = None
        self._done.set()
        self._requested.set()

    @classmethod
    def request(cls, stop: KeyboardInterrupt, signum: int) -> bool:
        """A signal came (in the signal handler): whether a run armed takes it as
        its first, stopping gracefully; False means stop at once."""
        graceful = cls._current
        if graceful is None or graceful.stop is not None:
            return False
        graceful.stop, graceful._signum = stop, signum
        graceful.since = time.monotonic()
        graceful.input.stop_reading(f"the run was stopped ({signal.Signals(signum).name})")
        graceful._requested.set()
        return True

    def _watch(self) -> None:
        self._requested.wait()
        if not self._done.wait(self.timeout) and GracefulStop._current is self:
            log.warning("stopping at once: what the live input received took more than %g s "
                        "(--stop-timeout)", self.timeout)
            signal_main_thread(self._signum)       # (it wakes a sleep or a wait there)

    def items(self, items: Iterable) -> Iterator:
        told = False
        try:
            for item in items:
                yield item
                if self.stop is not None and not told:
                    told = True
                    log.warning("stopping: evaluating what the live input received "
                                "(the same signal again stops at once)")
            if self.stop is not None:
                self.drained = True
                raise self.stop
        finally:
            self._disarm()      # the input is done with: a signal now stops at once


def signal_main_thread(signum: int) -> None:
    """Send ``signum`` to the main thread (from a watcher thread): its handler runs there."""
    if hasattr(signal, "pthread_kill"):
        signal.pthread_kill(threading.main_thread().ident, signum)
    else:
        _thread.interrupt_main(signum)


@contextlib.contextmanager
def at_most(seconds: float, signum: int):
    """Send ``signum`` to the main thread if the block takes longer than ``seconds``:
    its handler raises there, in a write that waits (an output whose reader has
    stopped reading would hold a stopping run for ever)."""
    done = threading.Event()

    def watch():
        if not done.wait(seconds):
            signal_main_thread(signum)

    threading.Thread(target=watch, daemon=True, name="spaseq output-timeout").start()
    try:
        yield
    finally:
        done.set()


class _Watchdog:
    """Stops the process at once when the main thread has not taken a signal of
    ``signals`` within ``timeout`` seconds (see the module docstring).  The signal
    handler counts what it took (a plain increment: a lock there could wait for
    one the interrupted code holds); the watchdog counts what the wakeup file
    descriptor told it, and compares."""

    def __init__(self, signals: set[int], timeout: float):
        self.signals = signals
        self.timeout = timeout
        self.taken = 0
        self._heard = 0
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous = -1

    def __enter__(self):
        try:
            self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        except ValueError:      # (not the main thread: nothing to watch)
            self._close()
            return self
        threading.Thread(target=self._watch, daemon=True, name="spaseq signal watchdog").start()
        return self

    def __exit__(self, *exc) -> None:
        if self._read is not None:
            signal.set_wakeup_fd(self._previous)
            os.close(self._write)       # (the watchdog reads the end of the pipe and returns)
            self._write = None

    def _close(self) -> None:
        for fd in (self._read, self._write):
            os.close(fd)
        self._read = self._write = None

    def _watch(self) -> None:
        read = self._read
        try:
            while True:
                heard = os.read(read, 64)
                if not heard:
                    return
                ours = [number for number in heard if number in self.signals]
                if not ours:
                    continue
                self._heard += len(ours)
                deadline = time.monotonic() + self.timeout
                while self.taken < self._heard:
                    if time.monotonic() >= deadline:
                        self._stop_at_once(ours[-1])
                    time.sleep(0.05)
        finally:
            os.close(read)

    def _stop_at_once(self, signum: int) -> None:
        frame = sys._current_frames().get(threading.main_thread().ident)
        where = "" if frame is None else \
            f" (in {frame.f_code.co_name}, {os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})"
        sys.stderr.write(f"spaseq: stopped at once ({signal.Signals(signum).name}): the run did not take the "
                         f"signal within {self.timeout:g} s (--stop-timeout), held in a call that does not "
                         f"return to Python{where}; what it had not written is lost\n")
        sys.stderr.flush()
        os._exit(128 + signum)      # (SIGINT: EXIT_INTERRUPTED, as interrupted_status says)


@contextlib.contextmanager
def stopping_on_signals(timeout: float = STOP_TIMEOUT):
    """While the command runs, SIGTERM and SIGHUP raise :class:`Terminated` and Ctrl-C
    :class:`KeyboardInterrupt` in the main thread, unless a :class:`GracefulStop` is
    armed and takes the signal (a signal the process inherited as ignored, as under
    nohup, stays so; so does a Ctrl-C handler set by whoever called the command).
    A signal the main thread has not taken within ``timeout`` seconds, held in
    native code, stops the process at once (:class:`_Watchdog`)."""
    def stop(signum, frame):
        watchdog.taken += 1
        exception = _stop_exception(signum)
        if not GracefulStop.request(exception, signum):
            raise exception

    watchdog = _Watchdog(set(), timeout)      # (before the handlers, which count into it)
    before = _take_signals(stop, also=(_raise_stop,))
    watchdog.signals.update(before)
    try:
        with watchdog:
            yield
    finally:
        _give_back(before)
