"""A2A: the agents published over Agent2Agent 1.0 (docs/a2a.md).

``handler.AgentTasks`` is the A2A SDK's request handler over the Responses lifecycle (a task is a
stored background response; ``push_methods`` its push-notification half, ``caller`` who calls), ``tasks`` maps one shape to the other, ``cards`` builds each agent's
Agent Card and ``store`` keeps which response answers for which task. ``api/a2a.py`` serves them.
"""
