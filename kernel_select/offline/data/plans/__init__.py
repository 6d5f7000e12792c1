"""Collection plans: what to measure next, written as shapes files (`kernel-select shapes`, and each
plan module's `python -m ... --out FILE`). They read the data layer (architectures, shapes, splits,
datasets) and nothing reads them but the CLI, calibrate and the experiments that replay them."""
