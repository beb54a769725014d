#!/usr/bin/env bash
# The evaluation runs behind docs/results.md: every method on the same seeded sample of the wiki-vital
# QA test split, grown a step at a time so that all methods always cover the same questions (a run
# folder resumes, and a larger --limit extends the same seeded sample).
#
#   bash bench/results_runs.sh [STEPS...]      e.g. bash bench/results_runs.sh 8 16 24
#
# Environment: RUNS (run folders, default ~/.cache/winnow/results-runs), DATA (the wiki-vital QA build),
# INDEX (its BM25 index), MODELS (default "qwen2.5-coder-1.5b"), METHODS, N, K, SEED.
# A METHODS entry "rankrag-fused" is RankRAG with --fusion-alpha 0.5 (its P("True") calls are the
# plain rankrag run's, so run it after that one and they come from the call cache).
# Then: .venv/bin/winnow report "$RUNS"/* --out docs/results/wiki-vital.md
set -euo pipefail
cd "$(dirname "$0")/.."
WINNOW=.venv/bin/winnow
CACHE=${WINNOW_CACHE_DIR:-$HOME/.cache/winnow}
DATA=${DATA:-$CACHE/wiki-vital-qa}
INDEX=${INDEX:-$CACHE/wv-index}
RUNS=${RUNS:-$CACHE/results-runs}
MODELS=${MODELS:-qwen2.5-coder-1.5b}
METHODS=${METHODS:-vanilla rankrag rankgpt mainrag rrr}
N=${N:-10}
K=${K:-5}
SEED=${SEED:-0}
STEPS=("${@:-10}")

[ -f "$DATA/test.jsonl" ] || $WINNOW bench-data build --out "$DATA"
[ -f "$INDEX/manifest.json" ] || $WINNOW index "$DATA/corpus.jsonl" --out "$INDEX"

for limit in "${STEPS[@]}"; do
  for model in $MODELS; do
    for entry in $METHODS; do
      case "$entry" in
        rankrag-fused) method=rankrag; extra=(--fusion-alpha 0.5) ;;
        *) method=$entry; extra=() ;;
      esac
      $WINNOW eval --index "$INDEX" --queries "$DATA/test.jsonl" --qrels "$DATA/qrels.test.txt" \
        --method "$method" --model "$model" --n "$N" --k "$K" --seed "$SEED" --limit "$limit" \
        "${extra[@]}" --out "$RUNS/$entry-$model-n$N-k$K"
    done
  done
done
