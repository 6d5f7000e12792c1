"""Training and evaluation: fit models on the datasets, score them on the frozen splits, choose what ships."""
