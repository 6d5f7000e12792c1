"""Problems and measurements: shapes files, the coverage sampler, the parquet dataset and its frozen
splits."""
