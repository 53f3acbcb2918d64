"""Dataset writers: they build datasets on disk from frames, videos and metadata (the readers never write)."""
