#!/bin/sh
# Slurm prolog (slurm.conf: Prolog=/etc/slurm/gpulens-prolog.sh), run as
# root on each node of a job before it starts: records the job's start
# and the GPUs Slurm gave it beside the node's gpulens dataset, so that
# people's own SQL can tell a job's allocation from its processes
# (docs/jobs.md). The collector itself needs no prolog: it reads each GPU
# process's job from /proc.
set -eu
DATASET=${GPULENS_DATASET:-/var/lib/gpulens}
mkdir -p "$DATASET/slurm"
printf '%s,%s,%s,%s,start,%s,"%s"\n' "$(date +%s%N)" "$(hostname)" "$SLURM_JOB_ID" "${SLURM_JOB_USER:-}" \
    "${SLURM_JOB_PARTITION:-}" "${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}" >> "$DATASET/slurm/jobs.csv"
exit 0
