"""Faust connectors for Kinesis Data Streams (arrive with their own issues)."""
