"""Fakes for the unit tests of sans-I/O pieces and of drivers: one in-memory Kinesis
(``kinesis``), the producer's recording sink (``producer``), and enhanced fan-out's event-stream
frames and HTTP/2 server (``fanout``). Every feature is also proven against kinesis-mock or moto
on loopback (tests/integration)."""
