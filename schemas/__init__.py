"""Versioned event and record contracts of SOLARIS (Avro `.avsc` files are the source of truth)."""
