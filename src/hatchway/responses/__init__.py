"""The Responses lifecycle: stored chains, runs, streams, background mode, the job queue and leases.

``service.Responses`` is what the API layer calls; ``runs`` prepares and executes one response on
the engine; ``background`` queues it or runs it after its request; ``store``, ``chain``, ``items``,
``wire``, ``events``, ``replay``, ``leases``, ``queue`` and ``worker`` are the parts.
"""
