"""Real servers for tests: start them, load data into them, stop them.

``virtuoso`` is a session fixture: a Virtuoso Open Source server (Debian's
``virtuoso-opensource``) in a temporary directory, on free loopback ports,
with an empty database.  It finds ``virtuoso-t`` (``SPASEQ_VIRTUOSO_BIN``,
then PATH and the usual install places).  The tests never install it: where
it is missing or does not start, the tests that use it are skipped with the
reason, and fail under CI (``CI=true``), where ``.ci/run`` installs it.

Use it from a test module with ``from servers import virtuoso  # noqa: F401``
(pytest finds fixtures imported into a module).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import server_unavailable

START_TIMEOUT = 120            # seconds for the server to answer SPARQL
DBA_PASSWORD = "dba"           # a new database's default; the server only listens on loopback
VIRTUOSO_PLACES = ("/usr/bin/virtuoso-t", "/usr/lib/virtuoso-opensource-7/bin/virtuoso-t",
                   "/usr/local/virtuoso-opensource/bin/virtuoso-t", "/opt/virtuoso-opensource/bin/virtuoso-t")

VIRTUOSO_INI = """\
[Database]
DatabaseFile       = {dir}/virtuoso.db
ErrorLogFile       = {dir}/virtuoso.log
LockFile           = {dir}/virtuoso.lck
TransactionFile    = {dir}/virtuoso.trx
xa_persistent_file = {dir}/virtuoso.pxa
ErrorLogLevel      = 7
FileExtend         = 200
Striping           = 0
TempStorage        = TempDatabase

[TempDatabase]
DatabaseFile       = {dir}/virtuoso-temp.db
TransactionFile    = {dir}/virtuoso-temp.trx
Striping           = 0

[Parameters]
ServerPort          = 127.0.0.1:{sql_port}
DisableUnixSocket   = 1
CaseMode            = 2
DirsAllowed         = ., {dir}
NumberOfBuffers     = 10000
MaxDirtyBuffers     = 6000
ThreadsPerQuery     = 1
AsyncQueueMaxThreads = 2
CheckpointInterval  = 0
VADInstallDir       = {dir}/vad

[HTTPServer]
ServerPort           = 127.0.0.1:{http_port}
ServerRoot           = {dir}/vsp
ServerThreads        = 4
MaxClientConnections = 4
MaxKeepAlives        = 4
KeepAliveTimeout     = 10
Charset              = UTF-8

[SPARQL]
ResultSetMaxRows           = {max_rows}
MaxQueryExecutionTime      = 60
MaxQueryCostEstimationTime = 400
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- finding or installing ---------------------------------------------------------------

def find_virtuoso() -> str | None:
    explicit = os.environ.get("SPASEQ_VIRTUOSO_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("virtuoso-t")
    if found:
        return found
    return next((p for p in VIRTUOSO_PLACES if os.access(p, os.X_OK)), None)


def virtuoso_version(binary: str) -> str:
    try:
        p = subprocess.run([binary, "-?"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = re.search(r"Version\s+(\S+)", p.stdout + p.stderr)
    return m.group(1) if m else "unknown"


# -- the server ---------------------------------------------------------------------------

@dataclass
class VirtuosoServer:
    """A running Virtuoso: ``url`` is its SPARQL endpoint (read-only for anonymous users);
    :meth:`update` runs SPARQL UPDATE as the dba user through ``/sparql-auth``."""
    binary: str
    version: str
    directory: Path
    http_port: int
    sql_port: int
    process: subprocess.Popen | None = None
    loaded: set = field(default_factory=set)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def url(self) -> str:
        return f"{self.base}/sparql"

    def log_tail(self, lines: int = 15) -> str:
        text = ""
        for name in ("virtuoso.log", "stdout.log"):
            path = self.directory / name
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join(text.strip().splitlines()[-lines:])

    def start(self) -> None:
        (self.directory / "vsp").mkdir(exist_ok=True)
        (self.directory / "vad").mkdir(exist_ok=True)
        ini = self.directory / "virtuoso.ini"
        ini.write_text(VIRTUOSO_INI.format(dir=self.directory, sql_port=self.sql_port,
                                           http_port=self.http_port, max_rows=1_000_000))
        out = open(self.directory / "stdout.log", "wb")
        self.process = subprocess.Popen([self.binary, "+foreground", "+configfile", str(ini)],
                                        cwd=self.directory, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"virtuoso-t exited with status {self.process.returncode}:\n"
                                   + self.log_tail())
            try:
                self.query("ASK { }", timeout=5)
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"Virtuoso did not answer SPARQL within {START_TIMEOUT} s:\n" + self.log_tail())

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()           # virtuoso-t checkpoints and exits on SIGTERM
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def query(self, sparql: str, accept: str = "application/sparql-results+json", timeout: float = 30) -> bytes:
        data = urllib.parse.urlencode({"query": sparql}).encode()
        request = urllib.request.Request(self.url, data=data, headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()

    def update(self, sparql: str, timeout: float = 60) -> None:
        manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        manager.add_password(None, self.base + "/", "dba", DBA_PASSWORD)
        opener = urllib.request.build_opener(urllib.request.HTTPDigestAuthHandler(manager))
        data = urllib.parse.urlencode({"update": sparql}).encode()
        request = urllib.request.Request(self.base + "/sparql-auth", data=data,
                                         headers={"Accept": "application/sparql-results+json"})
        try:
            with opener.open(request, timeout=timeout) as response:
                response.read()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"Virtuoso refused an update: HTTP {e.code}: "
                               f"{e.read(500).decode('utf-8', 'replace')}") from None

    def load_quads(self, quads, batch: int = 500) -> int:
        """Insert pyoxigraph quads of named graphs (default-graph quads are skipped: in
        Virtuoso every graph is named).  INSERT {...} WHERE {}, not INSERT DATA, because
        Virtuoso refuses blank nodes in INSERT DATA."""
        import pyoxigraph as ox
        by_graph: dict[str, list[str]] = {}
        for q in quads:
            if isinstance(q.graph_name, ox.DefaultGraph):
                continue
            by_graph.setdefault(q.graph_name.value, []).append(f"{q.subject} {q.predicate} {q.object} .")
        count = 0
        for graph, triples in by_graph.items():
            for i in range(0, len(triples), batch):
                body = "\n".join(triples[i:i + batch])
                self.update(f"INSERT {{ GRAPH <{graph}> {{\n{body}\n}} }} WHERE {{ }}")
                count += len(triples[i:i + batch])
        return count

    def load_trig(self, text: str, key: str | None = None) -> None:
        """Load TriG text once per key (a session's tests share the server)."""
        import pyoxigraph as ox
        key = key or text
        if key in self.loaded:
            return
        self.load_quads(ox.parse(text, ox.RdfFormat.TRIG))
        self.loaded.add(key)


def start_virtuoso(directory: Path) -> VirtuosoServer:
    """Find and start Virtuoso in ``directory`` (see :func:`helpers.server_unavailable` when impossible)."""
    binary = find_virtuoso()
    if binary is None:
        server_unavailable("Virtuoso Open Source is not installed (Debian: apt-get install virtuoso-opensource; "
                           "or set SPASEQ_VIRTUOSO_BIN to a virtuoso-t)")
    server = VirtuosoServer(binary, virtuoso_version(binary), directory, free_port(), free_port())
    try:
        server.start()
    except (RuntimeError, OSError) as e:
        server_unavailable(f"Virtuoso {server.version} ({binary}) did not start: {e}")
    return server


@pytest.fixture(scope="session")
def virtuoso(tmp_path_factory):
    """A running Virtuoso for the session (see the module docstring)."""
    server = start_virtuoso(tmp_path_factory.mktemp("virtuoso"))
    yield server
    server.stop()
