#!/bin/sh
# Slurm epilog (slurm.conf: Epilog=/etc/slurm/gpulens-epilog.sh), run as
# root on each node of a job after it ends: records the job's end beside
# the node's gpulens dataset (see prolog.sh). An epilog must not fail the
# node: every error is ignored.
DATASET=${GPULENS_DATASET:-/var/lib/gpulens}
mkdir -p "$DATASET/slurm" 2>/dev/null
printf '%s,%s,%s,%s,end,%s,"%s"\n' "$(date +%s%N)" "$(hostname)" "$SLURM_JOB_ID" "${SLURM_JOB_USER:-}" \
    "${SLURM_JOB_PARTITION:-}" "${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}" >> "$DATASET/slurm/jobs.csv" 2>/dev/null
exit 0
