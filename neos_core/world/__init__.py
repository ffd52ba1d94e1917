"""The offline world's format and read-only access to a built one (``data_gen.world`` builds it)."""
