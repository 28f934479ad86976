"""A Spark standalone cluster on loopback, from pyspark's own launcher, for tests and benches.

``groupkit replay --master spark://HOST:PORT`` runs on any Spark cluster; this starts a small
real one on this machine, the way a user would by hand::

    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 ...
    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker spark://127.0.0.1:P ...

``SPARK_HOME`` is the installed pyspark's folder (it ships ``bin/`` and the jars). In order:

1. The master starts on a free loopback port, its web UI on another; it is up when the UI's
   ``/json/`` says ``ALIVE``.
2. Each worker starts with its cores, memory and a work folder of its own; the cluster is
   ready when the master's ``/json/`` counts them all ``ALIVE`` (no sleeps: the master's own
   account is the condition).
3. :meth:`StandaloneCluster.stop` stops the workers, then the master: SIGTERM, then SIGKILL
   after a grace period, each by the process id this object started (``spark-class`` execs
   the JVM, so that id is the JVM's; each runs in its own session, so the executors a worker
   forked go with it).

The processes inherit this process's environment (``PYTHONPATH`` included), so executors
import the same groupkit as the driver; ``PYSPARK_PYTHON`` is set to this interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from groupkit.dev.ports import free_port
from groupkit.errors import PipelineError

HOST = "127.0.0.1"


def spark_home() -> Path:
    try:
        import pyspark
    except ImportError as e:
        raise PipelineError("a Spark cluster needs PySpark: pip install 'groupkit[spark]'") from e
    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, on loopback."""

    def __init__(
        self,
        workers: int = 1,
        cores: int = 1,
        memory: str = "1g",
        work_dir: Path | None = None,
        timeout: float = 90.0,
    ) -> None:
        if workers < 1 or cores < 1:
            raise ValueError("workers and cores must be >= 1")
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.timeout = timeout
        self._own_dir = work_dir is None
        self.dir = work_dir or Path(tempfile.mkdtemp(prefix="groupkit-spark-"))
        self.port = 0
        self.ui_port = 0
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def _env(self) -> dict[str, str]:
        home = spark_home()
        return {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(self.dir / "logs"),
            "SPARK_WORKER_DIR": str(self.dir / "work"),
            "PYSPARK_PYTHON": sys.executable,
            # the daemons are small; the executors get their memory from the worker's share
            "SPARK_DAEMON_MEMORY": os.environ.get("SPARK_DAEMON_MEMORY", "256m"),
        }

    def _spawn(self, name: str, cls: str, args: list[str]) -> None:
        log = (self.dir / f"{name}.log").open("wb")
        cmd = [str(spark_home() / "bin" / "spark-class"), cls, *args]
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self._env(),
            start_new_session=True,  # its executors are in its session; Ctrl-C is ours
        )
        log.close()
        self._procs.append((name, proc))

    def state(self) -> dict[str, Any] | None:
        """The master's own account (its web UI's ``/json/``), or ``None`` if not up yet."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=2) as r:
                doc = json.loads(r.read())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def alive_workers(self) -> int:
        doc = self.state() or {}
        return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, cond: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if cond():
                return
            for name, proc in self._procs:
                if proc.poll() is not None:
                    raise PipelineError(
                        f"Spark {name} exited ({proc.returncode}):\n{self.log(name)}"
                    )
            time.sleep(0.2)
        raise PipelineError(f"timed out after {self.timeout:.0f}s waiting for {what}")

    def log(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> str:
        """Start the master and the workers; return the master's URL once all are alive."""
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.dir / "work").mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        try:
            self._spawn("master", "org.apache.spark.deploy.master.Master", [
                "--host", HOST, "--port", str(self.port), "--webui-port", str(self.ui_port),
            ])  # fmt: skip
            self._wait(lambda: (self.state() or {}).get("status") == "ALIVE", "the master")
            for n in range(self.workers):
                work = self.dir / "work" / f"w{n}"
                work.mkdir(parents=True, exist_ok=True)
                self._spawn(f"worker{n}", "org.apache.spark.deploy.worker.Worker", [
                    "--host", HOST, "--port", str(free_port()),
                    "--webui-port", str(free_port()), "--cores", str(self.cores),
                    "--memory", self.memory, "--work-dir", str(work), self.master_url,
                ])  # fmt: skip
            self._wait(lambda: self.alive_workers() >= self.workers, "the workers")
        except BaseException:
            self.stop()
            raise
        return self.master_url

    def stop(self, grace: float = 10.0) -> None:
        """Workers first, then the master; each by the id this object started it with."""
        for _name, proc in reversed(self._procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)  # its own session: it and its executors
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
        self._procs.clear()
        if self._own_dir:
            import shutil

            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
