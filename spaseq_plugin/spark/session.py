"""One SparkSession per process, with the environment Spark needs.

PySpark 4 needs Java 17 or newer and Python workers that can import this
package: :func:`spark_session` sets ``JAVA_HOME`` (when it is unset or too
old) to a JDK 17+ found under the usual places, and ``PYSPARK_PYTHON`` to
the running interpreter, before the JVM starts.  Starting a session costs
seconds, so it is made once and shared; asking for another master (the
bench compares ``local[1]`` with ``local[2]``) replaces it.

Spark's own logging is limited to errors (``log4j2.properties``, which also
gives PySpark's gateway logger a level, so that Spark does not announce
its default log level as a shell does).  The JVM itself prints
``WARNING: Using incubator modules`` before any logging starts: the JVM's
standard error goes through :func:`_forward_stderr`, which drops that line.

PySpark is an optional dependency (``pip install 'spaseq-plugin[spark]'``):
:func:`require_pyspark` says how to install it (a ``UsageError``, exit 2).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import logging
import os
import re
import subprocess
import sys
import threading

from ..errors import LimitError, SpaseqError, UsageError

DEFAULT_MASTER = "local[*]"
JVM_EXIT_SECONDS = 10.0     # the most spaseq waits at exit for Spark's JVM to end
INSTALL_SPARK = "pip install 'spaseq-plugin[spark]'"
# JVM output that is no news to a user (the JVM writes it before logging is set up)
_JVM_BANNER = re.compile(rb"^WARNING: Using incubator modules: ")
JVM_DIRS = ("/usr/lib/jvm/*", "/usr/local/lib/jvm/*", "/opt/java/*", "/opt/jdk*",
            "/Library/Java/JavaVirtualMachines/*/Contents/Home")

_session = None
_master = None
log = logging.getLogger(__name__)
_exiting = threading.Event()        # spaseq is exiting: the JVM's standard error is no longer shown


def spark_master(requested: str | None = None) -> str:
    """``--spark-master``, else ``SPARK_MASTER``, else ``local[*]``."""
    return requested or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER


def require_pyspark(what: str) -> None:
    """Raise a UsageError saying how to install PySpark, which ``what`` needs, when it is missing."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise UsageError(f"{what} needs PySpark, which is not installed: {INSTALL_SPARK}") from None


def driver_memory() -> str:
    """The JVM's heap in local mode (the driver's on a cluster): ``SPASEQ_SPARK_DRIVER_MEMORY``, else 2g."""
    return os.environ.get("SPASEQ_SPARK_DRIVER_MEMORY", "2g")


def spark_session(master: str | None = None):
    """The shared SparkSession for ``master`` (see :func:`spark_master`)."""
    global _session, _master
    master = spark_master(master)
    if _session is not None and _master == master:
        return _session
    stop_spark()
    require_pyspark("the Spark pipeline")
    prepare_environment()
    _quiet_py4j()
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession
    cores = os.cpu_count() or 2
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_config = os.path.join(os.path.dirname(__file__), "log4j2.properties")
    options = {
        "spark.master": master, "spark.app.name": "spaseq",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
        "spark.sql.adaptive.enabled": "true",
        "spark.driver.memory": driver_memory(),
        "spark.python.worker.reuse": "true",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log_config}",
        "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log_config}",
    }
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    try:
        if SparkContext._gateway is None:           # the JVM starts once per process
            conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
            SparkContext._ensure_initialized(gateway=_launch_gateway(conf))
        _session = builder.getOrCreate()
    except Exception as e:      # the JVM did not start: report why, not a Py4J traceback
        why = _start_failure(e)
        if "INVALID_DRIVER_MEMORY" in why:
            raise UsageError(f"cannot start Spark: {why} (SPASEQ_SPARK_DRIVER_MEMORY is {driver_memory()}: "
                             "give it more)") from None
        raise SpaseqError(f"cannot start Spark (master {master}): {why}") from None
    _session.sparkContext.setLogLevel("ERROR")
    server = getattr(_session.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = _accumulator_error
    _master = master
    return _session


def _start_failure(error: Exception) -> str:
    """Why Spark did not start: the first Java exception's message in a Py4J error (its
    first line only says which call failed), else that first line."""
    lines = str(error).splitlines()
    for line in lines[1:]:
        found = re.match(r"\s*(?::\s*)?(?:Caused by: )?[\w.$]+(?:Exception|Error): (.+)", line)
        if found:
            return found.group(1).strip()
    return lines[0] if lines else type(error).__name__


def _launch_gateway(conf):
    """Start Spark's JVM (as PySpark does) with its standard error read by :func:`_forward_stderr`.

    The JVM exits when our end of its standard input closes, but it starts watching it only
    once it has written where its gateway listens, into a directory PySpark removes when it
    stops waiting.  A signal (SIGTERM, Ctrl-C) in those seconds made PySpark remove it, the
    JVM failed to write there and never watched its input: a JVM left running after spaseq
    had exited, for good.  So a JVM whose launch did not complete is stopped here."""
    from pyspark import java_gateway
    read, write = os.pipe()
    started: list[subprocess.Popen] = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)
    popen, java_gateway.Popen = java_gateway.Popen, Recorded
    try:
        gateway = java_gateway.launch_gateway(conf, popen_kwargs={"stderr": write})
    except BaseException:
        os.close(read)
        for process in started:
            _stop_process(process)
        raise
    finally:
        java_gateway.Popen = popen
        os.close(write)
    if gateway.proc is not None:
        atexit.register(_end_jvm, gateway.proc)
    threading.Thread(target=_forward_stderr, args=(read,), name="spaseq spark stderr", daemon=True).start()
    return gateway


def _end_jvm(process: subprocess.Popen) -> None:
    """At exit: close the JVM's standard input, which ends it (its shutdown removes its
    temporary directories), and wait for that; one that has not ended within
    JVM_EXIT_SECONDS (a JVM interrupted while it set up a session can hang there) is
    stopped.  Without this the JVM ended on its own after spaseq had, or never."""
    if process.poll() is not None:
        return
    _exiting.set()          # what the JVM says as it shuts down (Java traces of cancelled work) is no news
    try:
        with contextlib.suppress(OSError, ValueError):
            process.stdin.close()
        process.wait(JVM_EXIT_SECONDS)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        _stop_process(process, 2.0)


def _stop_process(process: subprocess.Popen, seconds: float = 5.0) -> None:
    """Stop a process (SIGTERM, then SIGKILL after ``seconds``) and reap it."""
    try:
        process.terminate()
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    except (OSError, KeyboardInterrupt):        # (gone already; a second signal: stop waiting)
        with contextlib.suppress(OSError):
            process.kill()


class _Py4JRootRecords(logging.Filter):
    """Py4J logs a failed command through the root logger (``logging.exception``), which
    Python then sets up to print to standard error: Ctrl-C or SIGTERM during a Spark job
    printed ``ERROR:root:KeyboardInterrupt while sending command.`` and a traceback before
    the run's own message.  The run reports the stop, or the failure, itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "root" and f"{os.sep}py4j{os.sep}" in record.pathname:
            log.debug("py4j: %s", record.getMessage())
            return False
        return True


def _accumulator_error(request, address) -> None:
    """PySpark's accumulator server printed a traceback (``Exception occurred during
    processing of request``, ``EOFError``) when the JVM's connection to it broke, as it does
    when a run is stopped during a job: logged at debug level instead."""
    log.debug("Spark's accumulator connection from %s failed", address, exc_info=True)


def _quiet_py4j() -> None:
    """Py4J's own loggers (``py4j.clientserver``: ``Exception occurred while shutting down
    connection``, a traceback) reached the root logger as well: they stop at ``py4j``."""
    logging.getLogger("py4j").propagate = False
    root = logging.getLogger()
    if not any(isinstance(f, _Py4JRootRecords) for f in root.filters):
        root.addFilter(_Py4JRootRecords())


def _forward_stderr(fd: int) -> None:
    """Copy the JVM's standard error to ours, line by line, without its banner.
    (Raw ``os`` calls: a daemon thread must hold no lock of ``sys.stderr`` at exit.)"""
    pending = b""
    try:
        while chunk := os.read(fd, 1 << 16):
            *lines, pending = (pending + chunk).split(b"\n")
            shown = b"".join(line + b"\n" for line in lines if not _JVM_BANNER.match(line))
            if shown and not _exiting.is_set():
                os.write(2, shown)
        if pending and not _JVM_BANNER.match(pending) and not _exiting.is_set():
            os.write(2, pending)
    except OSError:
        pass
    finally:
        os.close(fd)


JVM_OUT_OF_MEMORY = ("Spark's JVM ran out of memory ({what}): give it more (SPASEQ_SPARK_DRIVER_MEMORY, "
                     "now {memory}; on a cluster spark.executor.memory), or cut the input into more pieces "
                     "(--spark-pieces)")
WORKER_OUT_OF_MEMORY = ("a Spark task's Python worker ran out of memory: cut the input into more pieces "
                        "(--spark-pieces), or give the workers more memory")


def task_failure(error: Exception) -> SpaseqError:
    """A Spark job's failure as a user-facing error: the Python exception's last line; running
    out of memory, in the JVM or in a Python worker, is a limit (exit status 3) whose
    message says what to change."""
    text = str(error)
    oom = re.search(r"java\.lang\.OutOfMemoryError(?:: ([^\n]*))?", text)
    if oom:
        return LimitError(JVM_OUT_OF_MEMORY.format(what=(oom.group(1) or "OutOfMemoryError").strip(),
                                                   memory=driver_memory()))
    if re.search(r"^\s*MemoryError\b", text, re.M):
        return LimitError(WORKER_OUT_OF_MEMORY)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("at ")]
    python = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line)]
    detail = (python or lines or [type(error).__name__])[-1]
    return SpaseqError(f"a Spark task failed: {detail}")


def running_master() -> str | None:
    """The master of the shared session, when one runs."""
    return _master


def stop_spark() -> None:
    """Stop the shared session (the JVM stays for the next one)."""
    global _session, _master
    if _session is not None:
        _session.stop()
    _session = _master = None


def prepare_environment() -> None:
    """Set JAVA_HOME to a Java 17+ and the workers' Python to this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    home = os.environ.get("JAVA_HOME")
    if home and _java_version(os.path.join(home, "bin", "java")) >= 17:
        return
    candidates = [(_java_version(os.path.join(d, "bin", "java")), d)
                  for pattern in JVM_DIRS for d in sorted(glob.glob(pattern))]
    usable = sorted((v, d) for v, d in candidates if v >= 17)
    if not usable:
        found = f" (JAVA_HOME={home} is older)" if home else ""
        raise SpaseqError("Spark needs Java 17 or newer; install a JDK (Debian: openjdk-17-jdk-headless) "
                          f"or set JAVA_HOME to one{found}")
    # the oldest usable one: Spark 4 is built and tested on 17 and 21
    os.environ["JAVA_HOME"] = usable[0][1]


def _java_version(java: str) -> int:
    if not os.path.isfile(java):
        return 0
    try:
        text = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return 0
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major
