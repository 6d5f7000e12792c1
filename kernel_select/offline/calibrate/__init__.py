"""`kernel-select calibrate`: a GPU without a trained model measures itself for a few minutes and
trains its own (run.py: `calibrate(CalibrateOptions(...), detect())`): the plan
(offline/data/calibration_plan.py), the time budget and progress (budget.py), the model it starts
from (start.py), the held-out scores (scoring.py) and the model folder it writes (install.py). Nothing
is imported here, so the command line's parser reads budget.py without loading torch."""
