"""One-file Java programs run against Kafka's jars: compiled once, cached, or run from source.

:func:`java_program_command` gives the argv that runs the ``main`` of a single ``.java``
source with :func:`~kgroup.testing._kafka.kafka_libs` on the classpath. The source is
compiled with ``javac`` once into ``cache_root()/<cache_name>/<hash>`` (the hash covers the
source, the jar directory and the ``javac`` binary); parallel processes share one build
through a file lock. Without ``javac`` the program runs in Java's single-file source mode.

Used by :class:`~kgroup.testing.JavaMember` and by the assignor oracle of the tests.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ._kafka import KAFKA_VERSION, _file_lock, cache_root, find_java, kafka_libs

__all__ = ["JavaCompileError", "compiled_classes", "java_program_command"]

#: JVM options for short-lived helper programs: small heap, quick start.
HELPER_JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


class JavaCompileError(RuntimeError):
    """``javac`` rejected a helper program's source."""


def _javac(java: str) -> str | None:
    javac = Path(java).resolve().parent / "javac"
    return str(javac) if javac.is_file() else shutil.which("javac")


def compiled_classes(
    source: Path,
    *,
    java: str,
    libs: Path,
    cache_name: str,
    error: type[Exception] = JavaCompileError,
) -> Path | None:
    """Directory holding the compiled classes of ``source`` (None: no ``javac`` here).

    ``error`` is raised, with javac's output, when the source does not compile.
    """
    javac_path = _javac(java)
    if javac_path is None:
        return None
    main_class = source.stem
    key = source.read_bytes() + f"\0{libs}\0{os.path.realpath(javac_path)}".encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    out = cache_root() / cache_name / digest
    if (out / f"{main_class}.class").is_file():
        return out
    with _file_lock(cache_root() / cache_name / f"{digest}.lock"):
        if (out / f"{main_class}.class").is_file():
            return out
        tmp = Path(tempfile.mkdtemp(prefix="build-", dir=out.parent))
        try:
            result = subprocess.run(
                [javac_path, "-nowarn", "-d", str(tmp), "-cp", str(libs / "*"), str(source)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=300,
                check=False,
            )
            if result.returncode != 0:
                output = (result.stdout + result.stderr).decode("utf-8", "replace")
                raise error(f"javac {source.name} failed:\n{output[-4000:]}")
            tmp.rename(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def java_program_command(
    source: Path,
    args: Sequence[str] = (),
    *,
    cache_name: str,
    jvm_options: Sequence[str] = HELPER_JVM_OPTIONS,
    version: str = KAFKA_VERSION,
    error: type[Exception] = JavaCompileError,
) -> list[str]:
    """The argv running ``source``'s main class with ``args`` (fetches jars, compiles).

    Raises :class:`~kgroup.testing.BrokerUnavailable` without Java (or the jars and Maven).
    """
    java = find_java()
    libs = kafka_libs(version)
    compiled = compiled_classes(source, java=java, libs=libs, cache_name=cache_name, error=error)
    jvm = [java, *jvm_options]
    if compiled is not None:
        return [*jvm, "-cp", f"{compiled}{os.pathsep}{libs / '*'}", source.stem, *args]
    return [*jvm, "-cp", str(libs / "*"), str(source), *args]
