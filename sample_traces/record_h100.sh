#!/usr/bin/env bash
# Record a real-GPU sample: telemetry from `gpulens collect --backend nvml`
# while sample_traces/h100_workload.py runs and profiles itself, with
# nvidia-smi logging beside it to check our numbers against.
#
#   sample_traces/record_h100.sh OUT_DIR
#
# OUT_DIR/dataset   the gpulens dataset: telemetry, devices, events,
#                   processes; traces/ for the run the collector ingested
#                   while watching raw/kineto/train (--watch-traces)
#          /dataset/raw/kineto/{train,small-batch}  the profiler's traces
#          /dataset/raw/nccl                         NCCL_DEBUG=INFO log
#          /dataset/raw/phases.json                  the job's phases (epoch ns)
# OUT_DIR/logs      nvidia-smi -q, its 250 ms log and dmon, our checks
#                   (bench/nvml_vs_nvidia_smi.py idle and under load), the
#                   collector overhead on real NVML and each read's cost
# Needs: an NVIDIA GPU, nvidia-smi, PyTorch with CUDA, and gpulens on the PATH.
set -u
out=${1:?usage: record_h100.sh OUT_DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
dataset=$out/dataset
logs=$out/logs
kineto=$dataset/raw/kineto
mkdir -p "$logs" "$kineto/train" "$kineto/small-batch" "$dataset/raw/nccl"
phase_file=$out/phase
step() { echo "== $(date -u +%H:%M:%S) $*"; }

step "the machine"
nvidia-smi -L
nvidia-smi -q >"$logs/nvidia-smi-q.txt"
nvidia-smi topo -m >"$logs/nvidia-smi-topo.txt" 2>&1
python3 -c 'import torch, pynvml, pyarrow; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "| pyarrow", pyarrow.__version__)'
gpulens devices --backend nvml | tee "$logs/devices.txt"

step "NVML against nvidia-smi, idle"
python3 "$repo/bench/nvml_vs_nvidia_smi.py" --pairs 10 --label idle --csv "$logs/pairs-idle.csv" | tee "$logs/check-idle.txt"

step "sampling: gpulens collect at 4 Hz, nvidia-smi at 4 Hz, dmon at 1 Hz"
fields=timestamp,index,power.draw.average,power.draw.instant,enforced.power.limit,utilization.gpu,utilization.memory
fields=$fields,clocks.sm,clocks.mem,temperature.gpu,temperature.memory,memory.used,clocks_event_reasons.active
nvidia-smi --query-gpu=$fields --format=csv,nounits -lms 250 >"$logs/nvidia-smi-250ms.csv" &
smi_pid=$!
nvidia-smi dmon -s pucvmet -o T >"$logs/nvidia-smi-dmon.txt" &
dmon_pid=$!
gpulens collect --backend nvml --interval 0.25 --flush-every 10 --out "$dataset" \
    --watch-traces "$kineto/train" --run h100-train >"$logs/collect.log" 2>&1 &
collect_pid=$!

step "the job"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,TUNING NCCL_DEBUG_FILE="$dataset/raw/nccl/nccl.%h.%p.log" \
    python3 "$repo/sample_traces/h100_workload.py" --traces "$kineto" --phases "$dataset/raw/phases.json" \
    --phase-file "$phase_file" 2>&1 | tee "$logs/job.log" &
job_pid=$!
for _ in $(seq 240); do  # the check runs beside the steady training, after its profiled steps
    [ "$(cat "$phase_file" 2>/dev/null)" = train-steady ] && break
    kill -0 $job_pid 2>/dev/null || break
    sleep 0.5
done
if [ "$(cat "$phase_file" 2>/dev/null)" = train-steady ]; then
    step "NVML against nvidia-smi, training"
    python3 "$repo/bench/nvml_vs_nvidia_smi.py" --pairs 16 --interval 0.25 --label training \
        --csv "$logs/pairs-training.csv" | tee "$logs/check-training.txt"
fi
wait $job_pid
step "job done; letting the collector see the last samples"
sleep 3
kill -TERM $collect_pid
wait $collect_pid
echo "collector exited $?"
cat "$logs/collect.log"
kill $smi_pid $dmon_pid
wait $smi_pid $dmon_pid 2>/dev/null

step "collector overhead on real NVML"
python3 "$repo/bench/collector_overhead.py" --nvml 20 --hz 10 | tee "$logs/overhead.txt"
step "what each NVML read costs"
python3 "$repo/bench/nvml_read_costs.py" --reps 20 --gpm 1 | tee "$logs/read-costs.txt"
step "done"
