#!/usr/bin/env bash
# Builds jvm/ballast-sink (spark_jobs/id_sink.py's Kafka writer) into one jar with javac, against
# the jars of the Spark it will run in and the Kafka connector's kafka-clients: no build tool and
# no download. Used by scripts/setup.sh and docker/*.Dockerfile.
#   scripts/build_sink.sh SPARK_JARS_DIR CONNECTOR_JARS_DIR OUT_JAR [PYTHON]
set -euo pipefail
spark_jars=$1 connector_jars=$2 out=$3 py=${4:-python3}
src=$(cd "$(dirname "$0")/../jvm/ballast-sink/src" && pwd)
command -v javac >/dev/null || { echo "javac is missing (it builds jvm/ballast-sink): apt-get install -y openjdk-17-jdk-headless" >&2; exit 1; }
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac -nowarn --release 17 -encoding UTF-8 -cp "$spark_jars/*:$connector_jars/*" -d "$classes" \
  $(find "$src" -name '*.java' | sort)
"$py" - "$classes" "$out" <<'PY'
import pathlib, sys, zipfile
root, jar = pathlib.Path(sys.argv[1]), sys.argv[2]
with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    for f in sorted(root.rglob("*.class")):
        z.write(f, f.relative_to(root).as_posix())
PY
