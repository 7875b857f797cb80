#!/usr/bin/env bash
# Install the system packages kgroup's integration tests need: a Java 17+ JDK and Maven
# (Apache Kafka for kgroup.testing.KafkaBroker is fetched from Maven Central with them, and
# JavaMember runs Kafka's Java client).
#
# Idempotent: does nothing when `java`, `javac` and `mvn` are already on PATH. Otherwise
# installs openjdk-17-jdk-headless and maven with apt-get, as root or through sudo; where
# neither is possible it prints what to install and exits non-zero.
set -euo pipefail

PACKAGES=(openjdk-17-jdk-headless maven)

missing=()
for tool in java javac mvn; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        missing+=("$tool")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-system-deps: java, javac and mvn present; nothing to do"
    exit 0
fi

echo "install-system-deps: missing ${missing[*]}; installing ${PACKAGES[*]}"

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system-deps: no apt-get here; install a Java 17+ JDK and Maven by hand" >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "install-system-deps: not root and no sudo; as root run:" >&2
    echo "    apt-get update && apt-get install -y ${PACKAGES[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
${SUDO[@]+"${SUDO[@]}"} apt-get update
${SUDO[@]+"${SUDO[@]}"} apt-get install -y --no-install-recommends "${PACKAGES[@]}"

for tool in java javac mvn; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "install-system-deps: $tool still missing after install" >&2
        exit 1
    fi
done
echo "install-system-deps: done ($(java -version 2>&1 | head -n 1); $(mvn -v 2>/dev/null | head -n 1))"
