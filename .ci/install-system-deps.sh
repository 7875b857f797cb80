#!/usr/bin/env bash
# Install the system packages kgroup's tests need: a Java 17+ JDK and Maven (Apache Kafka
# for kgroup.testing.KafkaBroker is fetched from Maven Central with them, and JavaMember runs
# Kafka's Java client), and Chromium (the HTML report's browser test drives Debian's
# /usr/bin/chromium through Playwright; Playwright's own browser download is never used).
#
# Idempotent: does nothing when `java`, `javac`, `mvn` and `chromium` are already on PATH.
# Otherwise installs the packages of the missing tools (openjdk-17-jdk-headless, maven,
# chromium) with apt-get, as root or through sudo; where neither is possible it prints what
# to install and exits non-zero.
set -euo pipefail

# tool -> the Debian package that provides it
declare -A PACKAGE_OF=(
    [java]=openjdk-17-jdk-headless
    [javac]=openjdk-17-jdk-headless
    [mvn]=maven
    [chromium]=chromium
)
TOOLS=(java javac mvn chromium)

missing=()
PACKAGES=()
for tool in "${TOOLS[@]}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        missing+=("$tool")
        package="${PACKAGE_OF[$tool]}"
        if [[ " ${PACKAGES[*]-} " != *" $package "* ]]; then
            PACKAGES+=("$package")
        fi
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-system-deps: java, javac, mvn and chromium present; nothing to do"
    exit 0
fi

echo "install-system-deps: missing ${missing[*]}; installing ${PACKAGES[*]}"

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system-deps: no apt-get here; install ${PACKAGES[*]} (or equivalents) by hand" >&2
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

for tool in "${TOOLS[@]}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "install-system-deps: $tool still missing after install" >&2
        exit 1
    fi
done
echo "install-system-deps: done ($(java -version 2>&1 | head -n 1); $(mvn -v 2>/dev/null | head -n 1); $(chromium --version 2>/dev/null | head -n 1))"
