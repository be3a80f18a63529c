#!/usr/bin/env bash
# The compiled Kineto and nvidia-smi scanners are C that parses untrusted
# input: build them with AddressSanitizer and UndefinedBehaviorSanitizer into
# build/sanitized/ (not the installed ones), then run the Kineto scanner over
# the hostile corpus and a seeded mutation fuzz of the shared traces (about a
# minute), checking that it gives the tables msgspec gives, or that both
# refuse; and the nvidia-smi scanner over a seeded mutation fuzz of the logs
# of tests/data/import/ (NVSMI_SECONDS, 10 by default), checking that it gives
# the tables and errors of the pure path. Run by .ci/run.
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
sanitized() {  # SOURCE NAME: build SOURCE into $out/NAME$suffix
    cc -std=c11 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
        -shared -fPIC -Wall -Wextra -Wno-unused-parameter -I"$include" "$1" -o "$out/$2$suffix"
}
sanitized collector/ingest/_kineto_scan.c _kineto_scan
sanitized collector/imports/_nvsmi_scan.c _nvsmi_scan
# Python itself is not built with ASan: its runtime must be loaded first,
# and Python's own allocations are not leaks to report.
export LD_PRELOAD="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
"$python" tests/hostile/fuzz_scanner.py --scanner "$out/_kineto_scan$suffix" --seconds "$seconds" --seed "$seed" --record
"$python" tests/hostile/fuzz_nvsmi.py --scanner "$out/_nvsmi_scan$suffix" --seconds "${NVSMI_SECONDS:-10}" \
    --seed "$seed" --record
