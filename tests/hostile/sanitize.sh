#!/usr/bin/env bash
# The compiled Kineto scanner is C that parses untrusted input: build it with
# AddressSanitizer and UndefinedBehaviorSanitizer into build/sanitized/ (not
# the installed one), then run it over the hostile corpus and a seeded
# mutation fuzz of the shared traces (about a minute), checking that it gives
# the tables msgspec gives, or that both refuse. Run by .ci/run.
#     tests/hostile/sanitize.sh [SECONDS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv/bin/python}
seconds=${1:-60}
seed=${2:-47}
out=build/sanitized
mkdir -p "$out"
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
so="$out/_kineto_scan$suffix"
cc -std=c11 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -shared -fPIC -Wall -Wextra -Wno-unused-parameter -I"$include" \
    collector/ingest/_kineto_scan.c -o "$so"
# Python itself is not built with ASan: its runtime must be loaded first,
# and Python's own allocations are not leaks to report.
LD_PRELOAD="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)" \
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$python" tests/hostile/fuzz_scanner.py --scanner "$so" --seconds "$seconds" --seed "$seed" --record
