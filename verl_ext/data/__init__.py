"""verl dataset adapters for the data ``data_gen`` exports."""
