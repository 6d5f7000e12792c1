"""`kernel-select calibrate`: a GPU without a trained model measures itself for a few minutes and trains its
own (run.py: `calibrate(CalibrateOptions(...), detect())`): the compile classes (classes.py) in the order
where the model it starts from (start.py) is least sure (priority.py), the plan sized to the minutes
(plan.py), the time budget and progress (budget.py), the plan alone without a GPU (preview.py), the
held-out scores (scoring.py) and the model folder it writes (install.py). Nothing is imported here, so
the command line's parser reads budget.py without loading torch."""
