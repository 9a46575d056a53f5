"""The durable job queue (HTCondor's schedd) and what it writes for its jobs."""
