#!/bin/sh
# results/active_learning_h100.json: choosing the next collection by committee disagreement against
# random choice at equal rows, retrospectively on the H100 data (CPU, about 5 minutes).
set -e
python -m kernel_select.offline.training.active_experiment --device h100 --epochs 40 --seeds 5 \
    --out results/active_learning_h100.json
