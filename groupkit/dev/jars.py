"""Apache Kafka's jars from Maven Central, and the Java that runs them.

1. ``ensure_jars(version)`` resolves ``org.apache.kafka:kafka_2.13`` and a log4j2 binding with
   ``mvn dependency:copy-dependencies`` into ``~/.cache/groupkit/kafka/<version>/lib``, once;
   later runs reuse the folder (a ``.complete`` marker says it was resolved whole).
2. ``skewed_clock_jvm_args(lib, offset_s)`` compiles, against those jars, the class that gives a
   broker a wall clock off by whole seconds.

``TESTED_KAFKA_VERSIONS`` are the releases the tests run: ``DEFAULT_KAFKA_VERSION`` for
everything, and ``OLDEST_KAFKA_VERSION``, the oldest release groupkit claims, for a smoke test.
``groupkit broker fetch`` resolves them all.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from groupkit.cache import cache_root
from groupkit.errors import DevBrokerError

DEFAULT_KAFKA_VERSION = "4.1.1"
#: the oldest Apache Kafka release groupkit is tested against: 3.3 is the first whose KRaft
#: mode is production-ready, and the local brokers run KRaft only
OLDEST_KAFKA_VERSION = "3.3.2"
TESTED_KAFKA_VERSIONS = (DEFAULT_KAFKA_VERSION, OLDEST_KAFKA_VERSION)
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"
MIN_JAVA = 17


def version_tuple(version: str) -> tuple[int, ...]:
    """``"3.3.2"`` -> ``(3, 3, 2)``; a suffix such as ``-rc1`` is ignored."""
    return tuple(int(p) for p in re.findall(r"\d+", version.split("-", 1)[0]))


def java_major_version(java: str = "java") -> int:
    """The major version of ``java`` on PATH; a clear error if it is missing or too old."""
    exe = shutil.which(java)
    if exe is None:
        raise DevBrokerError(
            f"java not found on PATH: install a Java {MIN_JAVA}+ runtime "
            "(Debian: apt-get install openjdk-17-jre-headless)"
        )
    out = subprocess.run([exe, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise DevBrokerError(f"could not read the Java version from {exe} -version")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise DevBrokerError(
            f"Java {major} found at {exe}; Kafka 4 needs Java {MIN_JAVA}+ "
            "(Debian: apt-get install openjdk-17-jre-headless)"
        )
    return major


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.groupkit</groupId>
  <artifactId>devbroker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>{slf4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""


def kafka_home(version: str = DEFAULT_KAFKA_VERSION) -> Path:
    return cache_root() / "kafka" / version


def ensure_jars(version: str = DEFAULT_KAFKA_VERSION, quiet: bool = True) -> Path:
    """Resolve Apache Kafka ``version``'s jars into the cache once; return the ``lib`` folder."""
    home = kafka_home(version)
    lib = home / "lib"
    if (home / ".complete").exists() and any(lib.glob("kafka_2.13-*.jar")):
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DevBrokerError(
            "mvn not found on PATH: install Maven to fetch Kafka's jars "
            "(Debian: apt-get install maven), or set GROUPKIT_BOOTSTRAP_SERVERS"
        )
    home.mkdir(parents=True, exist_ok=True)
    pom = home / "pom.xml"
    pom.write_text(_POM.format(kafka=version, slf4j=SLF4J_VERSION, log4j=LOG4J_VERSION))
    if lib.exists():
        shutil.rmtree(lib)
    cmd = [
        mvn,
        "-B",
        *(["-q"] if quiet else []),
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={lib}",
        "-DincludeScope=runtime",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not any(lib.glob("kafka_2.13-*.jar")):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise DevBrokerError(
            f"could not resolve org.apache.kafka:kafka_2.13:{version} from Maven Central "
            f"(mvn exit {proc.returncode}); is the version right and Maven Central reachable?\n"
            f"{tail}"
        )
    # A reload4j binding would fight log4j2 for slf4j; the broker logs through log4j2 only.
    for stray in lib.glob("*reload4j*.jar"):
        stray.unlink()
    (home / ".complete").write_text(version + "\n")
    return lib


_SKEW_CLOCK_SOURCE = Path(__file__).parent / "skewclock" / "SystemTime.java"


def skewed_clock_jvm_args(lib: Path, offset_s: int) -> tuple[list[str], list[str]]:
    """JVM arguments that run a broker with its wall clock ``offset_s`` seconds off.

    Kafka reads wall-clock time through one class, ``org.apache.kafka.common.utils.SystemTime``;
    ``skewclock/SystemTime.java`` replaces it (compiled once against this Kafka's clients jar,
    put before the jars on the class path) with the machine's clock plus
    ``-Dgroupkit.clock.offset.ms``. The broker then stamps LogAppendTime and times sessions as a
    broker whose clock is off; the monotonic clock stays, as a skewed wall clock leaves it.
    (libfaketime, which shifts the whole process's clock, made a broker take minutes to start
    here: a lock on every clock read.) Returns the class-path entries to put first and the
    JVM options; nothing for ``offset_s`` 0.
    """
    if offset_s == 0:
        return [], []
    out = cache_root() / "skewclock" / lib.parent.name
    built = out / "org" / "apache" / "kafka" / "common" / "utils" / "SystemTime.class"
    if not built.exists() or built.stat().st_mtime < _SKEW_CLOCK_SOURCE.stat().st_mtime:
        javac = shutil.which("javac")
        if javac is None:
            raise DevBrokerError("a broker with a skewed clock needs javac (a Java JDK, not a JRE)")
        clients = sorted(lib.glob("kafka-clients-*.jar"))
        if not clients:
            raise DevBrokerError(f"no kafka-clients jar in {lib}")
        out.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [javac, "-nowarn", "-cp", str(clients[0]), "-d", str(out), str(_SKEW_CLOCK_SOURCE)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise DevBrokerError("compiling the skewed clock failed:\n" + done.stderr[-2000:])
    return [str(out)], [f"-Dgroupkit.clock.offset.ms={offset_s * 1000}"]
