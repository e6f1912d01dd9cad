"""Helpers that several test modules share (fakes of the Kinesis API are in ``tests.fakes``)."""
