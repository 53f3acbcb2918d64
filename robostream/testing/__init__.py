"""Loopback servers for tests and benchmarks, never used by the readers: the slow store (`slow_store.py`: plain HTTP
with latency, bandwidth and a cap on requests in flight; `s3_dialect.py`: the same store spoken to as S3) and the
Hub emulator (`hub_store.py`). Each listens on 127.0.0.1 only and imports nothing of robostream outside this part.
"""
