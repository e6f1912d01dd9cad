"""The local Kinesis emulator: launcher, CLI and pytest fixtures."""
