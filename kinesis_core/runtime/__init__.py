"""What the drivers run on: the injected clock (:mod:`.clock`), deadlines that let a
cancellation through (:mod:`.timeouts`), the process's event-loop thread
(:mod:`.loop_thread`) and the garbage collector's settings (:mod:`.heap`)."""
