"""Problems and measurements: shapes files, the architecture table, the parquet dataset and its frozen
splits; `plans/` writes the collection plans from them."""
