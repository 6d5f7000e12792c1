"""Whole networks under torch.compile: the model zoo, methods, one worker process per run, the report."""
