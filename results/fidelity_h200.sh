#!/bin/sh
# results/fidelity_h200_shared.json and results/fidelity_h200_literal.json: does the harness time configs
# as Inductor's own kernels run, with the binaries `bench` shares across shapes (sizes passed at run time)
# and with `--literal-sizes` (M, N and K compiled in, as Inductor's template has them)? 32 configs per
# problem spread over the measured ranking (data/h200.parquet), Inductor's timing and the harness's side
# by side, problem by problem. Needs an H200; about 20 s per problem and mode. Both runs of 2026-11-28
# were bounded and resumed (--resume), so the files hold the shapes file's first 11 (shared) and 12
# (literal) problems; the same commands with --resume measure the rest.
#
# results/fidelity_h200_mid_*.json: the same on data/fidelity_shapes_h200_mid.json, 15 single GEMMs of
# data/h200.parquet at M 17-512 (three per M bucket: 17-32, 33-64, 65-128, 129-256, 257-512; bf16 and
# fp16, nn and nt), which decide up to which M the collection must compile the sizes in (bench
# --literal-sizes; data/h200_literal.parquet stops at M = 16). About ten minutes of GPU for both modes.
set -e
kernel-select fidelity --shapes data/fidelity_shapes_h200.json --data data/h200.parquet --configs 32 \
    --resume --json-out results/fidelity_h200_shared.json
kernel-select fidelity --shapes data/fidelity_shapes_h200.json --data data/h200.parquet --configs 32 \
    --resume --literal-sizes --json-out results/fidelity_h200_literal.json
kernel-select fidelity --shapes data/fidelity_shapes_h200_mid.json --data data/h200.parquet --configs 32 \
    --resume --json-out results/fidelity_h200_mid_shared.json
kernel-select fidelity --shapes data/fidelity_shapes_h200_mid.json --data data/h200.parquet --configs 32 \
    --resume --literal-sizes --json-out results/fidelity_h200_mid_literal.json
