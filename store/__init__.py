"""Keyed feature store of SOLARIS: backends (Redis, Aerospike, in-memory), key layout, values."""
