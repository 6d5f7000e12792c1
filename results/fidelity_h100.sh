#!/bin/sh
# results/fidelity_h100.json: does the dataset's harness rank configs as real Inductor does?
# 40 configs per problem spread over the measured ranking, timed by both. Needs an H100.
set -e
kernel-select fidelity --shapes data/fidelity_shapes.json --data data/h100.parquet --json-out results/fidelity_h100.json
